// Writes random-weight Hugging Face model directories of the test and benchmark shapes.
import { mkdirSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { Command, InvalidArgumentError } from 'commander';
import { writeSafetensors, tensorBytes, type TensorSpec } from '../loader/safetensors-write.js';
import type { FloatDType } from '../loader/types.js';
import { makeTestTokenizer } from './test-model/bpe.js';
import { configForShape, tensorSpecsForConfig, testModelShapes } from './test-model/shapes.js';
import { checkpointChunks } from './test-model/weights.js';
import { makeTestEagle3Head } from './test-model/eagle3.js';
import { startProgress, type Progress } from '../lab/progress.js';
import { GGUF_QUANTIZATIONS, modelDirToGgufParallel, type GgufQuantization } from './gguf-convert.js';

export { testModelShapes } from './test-model/shapes.js';

export interface MakeTestModelOptions {
  shape: string;
  outDir: string;
  dtype?: FloatDType;
  seed?: number;
  /** 1 writes model.safetensors; more writes model-0000i-of-0000n.safetensors and an index. */
  numShards?: number;
  /** Standard deviation of linear and embedding weights (norms sit near 1). */
  linearStd?: number;
  onProgress?: (numBytesWritten: number, numBytesTotal: number) => void;
  /** Each tensor repeats its first chunk of random values (benchmark weights at disk speed). */
  repeatChunks?: boolean;
  /** 'fp8': a block-FP8 checkpoint, as Qwen3-*-FP8 (projections F8_E4M3 with weight_scale_inv). */
  quantization?: 'fp8' | null;
}

export interface TestModelInfo {
  dir: string;
  config: Record<string, unknown>;
  numTensors: number;
  numWeightBytes: number;
  files: string[];
}

function splitIntoShards(specs: TensorSpec[], numShards: number): TensorSpec[][] {
  const totalBytes = specs.reduce((a, s) => a + tensorBytes(s), 0);
  const shards: TensorSpec[][] = [[]];
  let numBytes = 0;
  for (const spec of specs) {
    const boundary = (totalBytes * shards.length) / numShards;
    if (numBytes >= boundary && shards.length < numShards && shards.at(-1)!.length > 0) shards.push([]);
    shards.at(-1)!.push(spec);
    numBytes += tensorBytes(spec);
  }
  return shards;
}

function writeJson(file: string, value: unknown): void {
  writeFileSync(file, JSON.stringify(value, null, 2) + '\n');
}

export async function makeTestModel(opts: MakeTestModelOptions): Promise<TestModelInfo> {
  const dtype = opts.dtype ?? 'bf16';
  const seed = opts.seed ?? 0;
  const numShards = opts.numShards ?? 1;
  const linearStd = opts.linearStd ?? 0.02;
  if (!Number.isInteger(numShards) || numShards < 1) throw new Error(`numShards must be a positive integer, got ${numShards}`);
  const dir = resolve(opts.outDir);
  mkdirSync(dir, { recursive: true });

  const tokenizer = makeTestTokenizer();
  const ids = tokenizer.specialTokenIds;
  const config: Record<string, unknown> = {
    ...configForShape(opts.shape, dtype, opts.quantization ?? null),
    bos_token_id: ids['<|endoftext|>'],
    eos_token_id: ids['<|im_end|>'],
  };
  if ((config.vocab_size as number) < tokenizer.numTokens) {
    throw new Error(`shape ${opts.shape}: vocab_size ${config.vocab_size} is smaller than the test tokenizer (${tokenizer.numTokens})`);
  }
  writeJson(join(dir, 'config.json'), config);
  writeJson(join(dir, 'tokenizer.json'), tokenizer.tokenizerJson);
  writeJson(join(dir, 'tokenizer_config.json'), tokenizer.tokenizerConfig);
  writeJson(join(dir, 'generation_config.json'), {
    bos_token_id: ids['<|endoftext|>'],
    eos_token_id: [ids['<|im_end|>'], ids['<|endoftext|>']],
    pad_token_id: ids['<|endoftext|>'],
    do_sample: true,
    temperature: 0.6,
    top_k: 20,
    top_p: 0.95,
  });

  const specs = tensorSpecsForConfig(config, dtype);
  const numWeightBytes = specs.reduce((a, s) => a + tensorBytes(s), 0);
  const shards = splitIntoShards(specs, numShards);
  const files =
    numShards === 1
      ? ['model.safetensors']
      : shards.map((_, i) => `model-${String(i + 1).padStart(5, '0')}-of-${String(shards.length).padStart(5, '0')}.safetensors`);
  let numBytesWritten = 0;
  const tensorChunks = checkpointChunks(dtype, seed, linearStd, opts.repeatChunks ?? false);
  for (let i = 0; i < shards.length; i++) {
    await writeSafetensors(join(dir, files[i]!), {
      specs: shards[i]!,
      chunks: function* (spec) {
        for (const chunk of tensorChunks(spec)) {
          numBytesWritten += chunk.byteLength;
          opts.onProgress?.(numBytesWritten, numWeightBytes);
          yield chunk;
        }
      },
    });
  }
  if (numShards > 1) {
    const weightMap: Record<string, string> = {};
    shards.forEach((shard, i) => shard.forEach((spec) => (weightMap[spec.name] = files[i]!)));
    writeJson(join(dir, 'model.safetensors.index.json'), { metadata: { total_size: numWeightBytes }, weight_map: weightMap });
  }
  return { dir, config, numTensors: specs.length, numWeightBytes, files };
}

function nonNegativeInt(value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 0) throw new InvalidArgumentError('expected a non-negative integer');
  return n;
}

/** The make-test-model command (also `quire make-test-model`). */
export function makeTestModelCommand(): Command {
  return new Command('make-test-model')
    .description('Write a random-weight Hugging Face model directory of a test or benchmark shape.')
    .option('--shape <name>', 'shape name (--list shows them)', 'tiny-qwen3')
    .option('--out <dir>', 'output directory')
    .option('--dtype <dtype>', 'bf16 | f16 | f32', 'bf16')
    .option('--seed <n>', 'random seed', nonNegativeInt, 0)
    .option('--shards <n>', 'number of safetensors shards', nonNegativeInt, 1)
    .option('--fast', 'repeat each tensor\'s first 4 Mi random values (big benchmark models at disk speed)')
    .option('--quantization <method>', 'fp8: block-FP8 projections (F8_E4M3 and weight_scale_inv), as Qwen3-*-FP8')
    .option('--gguf <type>', `also write the model as one GGUF file, <out>.<type>.gguf (qwen3, qwen2, llama, phi3, qwen3_moe with every layer sparse, mixtral shapes; ${GGUF_QUANTIZATIONS.join(', ')})`)
    .option('--eagle3-head-for <dir>', 'write a random EAGLE-3 head for the test model in <dir> instead (--seed, --dtype, --out)')
    .option('--draft-vocab-size <n>', 'with --eagle3-head-for: its lm_head\'s rows (d2t maps them into the target\'s vocabulary)', nonNegativeInt)
    .option('--threads <n>', 'threads quantizing --gguf\'s tensors, a tensor each (default: every core)', nonNegativeInt)
    .option('--list', 'list the shapes and exit')
    .action(runMakeTestModel);
}

async function runMakeTestModel(o: { shape: string; out?: string; dtype: string; seed: number; shards: number;
  list?: boolean; fast?: boolean; quantization?: string; gguf?: string; threads?: number; eagle3HeadFor?: string;
  draftVocabSize?: number }): Promise<void> {
  if (o.list) {
    for (const name of Object.keys(testModelShapes())) console.log(name);
    return;
  }
  const outDir = o.out;
  if (outDir === undefined) throw new Error('--out <dir> is required');
  if (!['bf16', 'f16', 'f32'].includes(o.dtype)) throw new InvalidArgumentError(`--dtype must be bf16, f16 or f32, got ${o.dtype}`);
  if (o.quantization !== undefined && o.quantization !== 'fp8') {
    throw new InvalidArgumentError(`--quantization must be fp8, got ${o.quantization}`);
  }
  if (o.eagle3HeadFor !== undefined) {
    const config = makeTestEagle3Head({ target: o.eagle3HeadFor, outDir, dtype: o.dtype as FloatDType, seed: o.seed,
      draftVocabSize: o.draftVocabSize });
    console.log(`${resolve(outDir)}: an EAGLE-3 head for ${o.eagle3HeadFor}, draft vocabulary ${String(config.draft_vocab_size)}`);
    return;
  }
  const gguf = o.gguf;
  if (gguf !== undefined && !(GGUF_QUANTIZATIONS as readonly string[]).includes(gguf)) {
    throw new InvalidArgumentError(`--gguf must be one of ${GGUF_QUANTIZATIONS.join(', ')}, got ${gguf}`);
  }
  const startMs = Date.now();
  let bar: Progress | null = null;
  const info = await makeTestModel({
    shape: o.shape,
    outDir,
    dtype: o.dtype as FloatDType,
    seed: o.seed,
    numShards: o.shards,
    repeatChunks: o.fast ?? false,
    quantization: o.quantization === 'fp8' ? 'fp8' : null,
    onProgress: (done, total) => {
      bar ??= startProgress({ label: 'writing weights', total: total / 2 ** 20, unit: 'MiB', format: (n) => n.toFixed(1) });
      bar.update(done / 2 ** 20);
    },
  });
  (bar as Progress | null)?.stop();
  const seconds = (Date.now() - startMs) / 1000;
  console.log(
    `${info.dir}: ${o.shape}, ${info.numTensors} tensors, ${(info.numWeightBytes / 2 ** 20).toFixed(1)} MiB of ${o.dtype}${o.quantization ? ' and block-FP8' : ''} weights in ` +
      `${info.files.length} file(s), ${seconds.toFixed(1)} s`,
  );
  if (gguf !== undefined) {
    const file = `${resolve(outDir)}.${gguf}.gguf`;
    const t0 = Date.now();
    await modelDirToGgufParallel(info.dir, file, gguf as GgufQuantization, o.threads);
    console.log(`${file}: the same weights as one ${gguf} GGUF file, ${((Date.now() - t0) / 1000).toFixed(1)} s`);
  }
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(resolve(process.argv[1])).href) {
  makeTestModelCommand().parseAsync(process.argv).catch((err: unknown) => {
    console.error(err instanceof Error ? err.message : String(err));
    process.exit(1);
  });
}
