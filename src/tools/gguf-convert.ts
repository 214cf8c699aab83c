// A Hugging Face model directory (a test model) -> a GGUF file as convert_hf_to_gguf.py and llama-quantize would
// write it: llama.cpp's names and metadata keys, q/k rows permuted for Llama, the tokenizer in tokenizer.ggml.*.
// Quantizing is the slow part (a JS loop a block; 0.6B parameters to Q4_K_M ~33 s on one thread), so
// modelDirToGgufParallel hands one tensor at a time to worker threads (gguf-convert-worker.ts) and writes their
// results in the file's order: the same bytes as modelDirToGguf, an 8B model in a minute or so on 16 cores.
//   node dist/src/tools/gguf-convert.js <model dir> <out.gguf> <type> [threads]
import { join, resolve } from 'node:path';
import { existsSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { pathToFileURL } from 'node:url';
import { isMainThread, Worker } from 'node:worker_threads';
import { BYTES_PER_ELEMENT, bytesToF32 } from '../loader/dtype.js';
import { ggufShardName } from '../loader/gguf.js';
import { GGUF_FILE_TYPES, ggufPermutesQk } from '../loader/gguf-config.js';
import { ggufTensorName, moeTensorNames } from '../loader/gguf-weights.js';
import type { GgmlTypeName } from '../loader/gguf-quants.js';
import { loadModelDir } from '../loader/model-dir.js';
import { readJsonFile } from '../loader/tokenizer.js';
import type { DType, WeightSource } from '../loader/types.js';
import { ggufTensorBytes, openGgufWriter, quantize, type GgufMetaValue, type GgufTensorOut } from './gguf-write.js';

/** llama.cpp's file types Quire's tests write; a K-quant mix as llama-quantize's _M presets (simplified, below). */
export const GGUF_QUANTIZATIONS = ['f32', 'f16', 'bf16', 'q8_0', 'q4_0', 'q4_k_m', 'q5_k_m', 'q6_k'] as const;
export type GgufQuantization = (typeof GGUF_QUANTIZATIONS)[number];

/** The inverse of gguf-weights.ts's unpermuteQk: HF row j * D/2 + i of each head goes to row 2i + j. */
function permuteQk(src: Float32Array, rows: number, cols: number, headDim: number): Float32Array {
  const out = new Float32Array(src.length);
  const half = headDim / 2;
  for (let r = 0; r < rows; r++) {
    const head = Math.floor(r / headDim), within = r % headDim;
    const g = head * headDim + 2 * (within % half) + Math.floor(within / half);
    out.set(src.subarray(r * cols, (r + 1) * cols), g * cols);
  }
  return out;
}

/** The GGML type of tensor `name` (llama.cpp's name) of `cols` columns in quantization q. */
function tensorType(q: GgufQuantization, name: string, dims: number, cols: number): GgmlTypeName {
  if (dims === 1) return 'F32';
  const base: Record<GgufQuantization, GgmlTypeName> = { f32: 'F32', f16: 'F16', bf16: 'BF16', q8_0: 'Q8_0', q4_0: 'Q4_0',
    q4_k_m: 'Q4_K', q5_k_m: 'Q5_K', q6_k: 'Q6_K' };
  let t = base[q];
  // llama-quantize's _M mixes keep the output, attn_v and ffn_down a type higher (it does so on half the layers)
  if ((q === 'q4_k_m' || q === 'q5_k_m') && /^(output\.weight|blk\.\d+\.(attn_v|ffn_down|ffn_down_exps)\.weight)$/.test(name)) t = 'Q6_K';
  // as llama-quantize: rows that are not whole K-quant blocks fall back to Q8_0, or to F32 past Q8_0's block
  if (t.endsWith('_K') && cols % 256 !== 0) t = 'Q8_0';
  if (t.startsWith('Q') && cols % 32 !== 0) t = 'F32';
  return t;
}

const PRE_BY_REGEX: Record<string, string> = {
  "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+": 'qwen2',
  "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+": 'llama-bpe',
};

type Json = Record<string, unknown>;

/** tokenizer.ggml.token_type of a padding id (llama.cpp's LLAMA_TOKEN_TYPE_UNUSED). */
const UNUSED_TOKEN = 5;

/** tokenizer.json (byte-level BPE) -> tokenizer.ggml.* entries. */
export function tokenizerMetadata(tokenizerJson: Json, opts: { bos: number | null; eos: number | null; addBos: boolean;
  chatTemplate: string | null; vocabSize: number }): [string, GgufMetaValue][] {
  const model = tokenizerJson.model as { vocab: Record<string, number>; merges: (string | [string, string])[] };
  const added = (tokenizerJson.added_tokens ?? []) as { id: number; content: string; special?: boolean }[];
  const tokens: string[] = [];
  const types: number[] = [];
  for (const [t, id] of Object.entries(model.vocab)) { tokens[id] = t; types[id] = 1; }
  for (const a of added) { tokens[a.id] = a.content; types[a.id] = a.special ? 3 : 4; }
  // As convert_hf_to_gguf.py (get_vocab_base): one token per embedding row, an id the tokenizer lacks (a hole, or
  // the rows past it of a vocabulary padded to a multiple, as Qwen's) as "[PAD<id>]" of type UNUSED. llama.cpp takes
  // n_vocab from this list and refuses a token_embd.weight of more rows ("check_tensor_dims: ... wrong shape").
  if (tokens.length > opts.vocabSize) throw new Error(`tokenizer.json: ${tokens.length} tokens, more than vocab_size ${opts.vocabSize}`);
  for (let i = 0; i < opts.vocabSize; i++) {
    if (tokens[i] === undefined) { tokens[i] = `[PAD${i}]`; types[i] = UNUSED_TOKEN; }
  }
  const pre = tokenizerJson.pre_tokenizer as { pretokenizers?: { pattern?: { Regex?: string } }[] } | null;
  const regex = pre?.pretokenizers?.[0]?.pattern?.Regex;
  const preName = regex !== undefined ? PRE_BY_REGEX[regex] : undefined;
  if (preName === undefined) throw new Error(`tokenizer.json: its pre-tokenizer is not one gguf-convert knows (qwen2, llama-bpe)`);
  const out: [string, GgufMetaValue][] = [
    ['tokenizer.ggml.model', { type: 'string', value: 'gpt2' }],
    ['tokenizer.ggml.pre', { type: 'string', value: preName }],
    ['tokenizer.ggml.tokens', { type: 'array', of: 'string', value: tokens }],
    ['tokenizer.ggml.token_type', { type: 'array', of: 'i32', value: types }],
    ['tokenizer.ggml.merges', { type: 'array', of: 'string', value: model.merges.map((m) => Array.isArray(m) ? m.join(' ') : m) }],
    ['tokenizer.ggml.add_bos_token', { type: 'bool', value: opts.addBos }],
  ];
  if (opts.bos !== null) out.push(['tokenizer.ggml.bos_token_id', { type: 'u32', value: opts.bos }]);
  if (opts.eos !== null) out.push(['tokenizer.ggml.eos_token_id', { type: 'u32', value: opts.eos }]);
  if (opts.chatTemplate !== null) out.push(['tokenizer.chat_template', { type: 'string', value: opts.chatTemplate }]);
  return out;
}

/** A checkpoint tensor of the file: its names, GGUF type and shape, and its q/k rows' head size where permuted. */
export interface TensorJob {
  hf: string;
  name: string;
  type: GgmlTypeName;
  shape: number[];
  permuteHeadDim: number | null;
  /** Stacked experts [E, rows, cols]: the checkpoint's tensor of each expert, in order (hf names the first). */
  parts?: string[];
}

/** What `dir`'s model becomes as a GGUF file of quantization q: metadata, tensors made here, then the checkpoint's. */
interface GgufPlan {
  dir: string;
  weights: WeightSource;
  meta: [string, GgufMetaValue][];
  extra: GgufTensorOut[];
  jobs: TensorJob[];
}

/**
 * A job's data, or rows [r0, r1) of it: its tensor read from `weights`, q/k rows permuted for llama.cpp, quantized.
 * GGUF blocks run along a row, so a tensor's rows quantized apart and joined are the bytes of the whole (a permuted
 * tensor is converted whole).
 */
export function convertTensor(weights: WeightSource, job: TensorJob, r0 = 0, r1 = job.shape[0]!): Uint8Array {
  const cols = job.shape.length > 1 ? job.shape.slice(1).reduce((a, b) => a * b, 1) : 1;
  if (job.parts) {
    // llama.cpp's stacked experts: each expert's [rows, cols] one after another (converted whole: a 3-D job is one task)
    const values = new Float32Array(job.shape[0]! * cols);
    job.parts.forEach((hf, e) => {
      const t = weights.read(hf);
      values.set(bytesToF32(t.dtype, t.data), e * cols);
    });
    return quantize(job.type, values);
  }
  let t: { dtype: DType; data: Uint8Array };
  if (r0 === 0 && r1 === job.shape[0]) {
    t = weights.read(job.hf);
  } else {
    const { dtype } = weights.info(job.hf);
    const rowBytes = cols * BYTES_PER_ELEMENT[dtype];
    const data = new Uint8Array((r1 - r0) * rowBytes);
    if (weights.readInto) weights.readInto(job.hf, r0 * rowBytes, data);
    else data.set(weights.read(job.hf).data.subarray(r0 * rowBytes, r1 * rowBytes));
    t = { dtype, data };
  }
  let values = bytesToF32(t.dtype, t.data);
  if (job.permuteHeadDim !== null) values = permuteQk(values, job.shape[0]!, cols, job.permuteHeadDim);
  return quantize(job.type, values);
}

/** Writes `dir`'s model (qwen3, qwen2, llama, phi3, an all-sparse qwen3_moe, mixtral) as a GGUF file of quantization q. */
export function modelDirToGguf(dir: string, file: string, q: GgufQuantization): void {
  const plan = ggufPlan(dir, q);
  const w = openGgufWriter(file, plan.meta, [...plan.extra, ...plan.jobs]);
  try {
    for (const t of plan.extra) w.write(t.data);
    for (const job of plan.jobs) w.write(convertTensor(plan.weights, job));
  } catch (err) {
    abandon(w);
    throw err;
  }
  w.close();
}

/**
 * modelDirToGguf as llama.cpp's gguf-split writes a model in `shards` files: every shard a GGUF file of its own, the
 * tensors dealt out in order, the first shard with all the metadata, each with split.no (0-based), split.count and
 * split.tensors.count (every shard's tensors).
 */
export function modelDirToGgufShards(dir: string, base: string, q: GgufQuantization, shards: number): string[] {
  const plan = ggufPlan(dir, q);
  const tensors: (GgufTensorOut | TensorJob)[] = [...plan.extra, ...plan.jobs];
  const per = Math.ceil(tensors.length / shards);
  const files: string[] = [];
  for (let k = 0; k < shards; k++) {
    const mine = tensors.slice(k * per, (k + 1) * per);
    const split: [string, GgufMetaValue][] = [['split.no', { type: 'u16', value: k }], ['split.count', { type: 'u16', value: shards }],
      ['split.tensors.count', { type: 'i32', value: tensors.length }]];
    const file = ggufShardName(base, k + 1, shards);
    const w = openGgufWriter(file, k === 0 ? [...plan.meta, ...split] : split, mine);
    try {
      for (const t of mine) w.write('data' in t ? t.data : convertTensor(plan.weights, t));
    } catch (err) {
      abandon(w);
      throw err;
    }
    w.close();
    files.push(file);
  }
  return files;
}

/** A writer given up on: its file closed, the count it would refuse not checked. */
function abandon(w: { close(): void }): void {
  try {
    w.close();
  } catch {
    // an incomplete file: the caller's error says why
  }
}

/** Elements a task of modelDirToGgufParallel converts at most: a larger tensor is split by rows (not a permuted one). */
const TASK_ELEMENTS = 1 << 24;

/**
 * modelDirToGguf with the tensors quantized by `threads` worker threads, a tensor (or rows of a large one) a task,
 * written in the file's order as they complete (a finished tensor waits only for those before it): the same bytes.
 */
export async function modelDirToGgufParallel(dir: string, file: string, q: GgufQuantization,
  threads = availableParallelism(), taskElements = TASK_ELEMENTS): Promise<void> {
  const plan = ggufPlan(dir, q);
  const { jobs } = plan;
  if (threads <= 1 || jobs.length <= 1) return modelDirToGguf(dir, file, q);
  // tasks: rows [r0, r1) of job i, whose bytes start at `at` in the tensor's
  const tasks: { i: number; r0: number; r1: number; at: number }[] = [];
  const pending = jobs.map((job, i) => {
    const rows = job.shape[0]!, cols = job.shape.slice(1).reduce((a, b) => a * b, 1);
    const step = job.permuteHeadDim === null && job.shape.length === 2 ? Math.max(1, Math.floor(taskElements / cols)) : rows;
    const rowBytes = ggufTensorBytes(job.type, [1, cols]);
    for (let r0 = 0; r0 < rows; r0 += step) tasks.push({ i, r0, r1: Math.min(rows, r0 + step), at: r0 * rowBytes });
    return Math.ceil(rows / step);
  });
  const w = openGgufWriter(file, plan.meta, [...plan.extra, ...jobs]);
  const workers = Array.from({ length: Math.min(threads, tasks.length) }, () =>
    new Worker(new URL('./gguf-convert-worker.js', import.meta.url), { workerData: { dir: plan.dir } }));
  try {
    for (const t of plan.extra) w.write(t.data);
    await new Promise<void>((done, fail) => {
      const parts = new Map<number, Uint8Array>();  // tensors being assembled, by job
      let next = 0;
      let written = 0;
      const give = (worker: Worker): void => {
        if (next >= tasks.length) return;
        const task = tasks[next++]!;
        worker.postMessage({ job: jobs[task.i], task });
      };
      for (const worker of workers) {
        worker.on('message', ({ task, data }: { task: (typeof tasks)[number]; data: Uint8Array }) => {
          try {
            const job = jobs[task.i]!;
            let whole = parts.get(task.i);
            if (whole === undefined) parts.set(task.i, whole = new Uint8Array(ggufTensorBytes(job.type, job.shape)));
            whole.set(data, task.at);
            pending[task.i]!--;
            for (; written < jobs.length && pending[written] === 0; written++) {
              w.write(parts.get(written)!);
              parts.delete(written);
            }
            if (written === jobs.length) done();
            else give(worker);
          } catch (err) {
            fail(err);
          }
        });
        worker.on('error', fail);
        worker.on('exit', (code) => {
          if (written < jobs.length) fail(new Error(`gguf-convert: a worker exited (code ${code}) before the last tensor`));
        });
        give(worker);
      }
    });
  } catch (err) {
    abandon(w);
    throw err;
  } finally {
    await Promise.all(workers.map((worker) => worker.terminate()));
  }
  w.close();
}

function ggufPlan(dir: string, q: GgufQuantization): GgufPlan {
  const m = loadModelDir(dir);
  const c = m.config;
  const a = GGUF_ARCH[c.architecture];
  if (a === undefined) {
    throw new Error(`gguf-convert: ${c.architecture} models are not written as GGUF (${Object.keys(GGUF_ARCH).join(', ')})`);
  }
  const moe = c.moe;
  if (moe && c.architecture === 'qwen3_moe' && (!moe.renormalize || moe.sparseLayers.some((sparse) => !sparse))) {
    // llama.cpp's qwen3moe: every layer sparse, the top k renormalized
    throw new Error(`gguf-convert: ${dir}: llama.cpp's qwen3moe has experts in every layer and norm_topk_prob true ` +
      '(config.json\'s mlp_only_layers, decoder_sparse_step or norm_topk_prob say otherwise)');
  }
  const meta: [string, GgufMetaValue][] = [
    ['general.architecture', { type: 'string', value: a }],
    ['general.alignment', { type: 'u32', value: 32 }],
    // llama.cpp's llama_ftype (gguf-config.ts GGUF_FILE_TYPES): what `quire gate` names the file's path by
    ['general.file_type', { type: 'u32', value: Number(Object.entries(GGUF_FILE_TYPES).find(([, name]) => name === q)![0]) }],
    [`${a}.block_count`, { type: 'u32', value: c.numLayers }],
    [`${a}.context_length`, { type: 'u32', value: c.maxPositionEmbeddings }],
    [`${a}.embedding_length`, { type: 'u32', value: c.hiddenSize }],
    [`${a}.feed_forward_length`, { type: 'u32', value: c.intermediateSize }],
    [`${a}.attention.head_count`, { type: 'u32', value: c.numHeads }],
    [`${a}.attention.head_count_kv`, { type: 'u32', value: c.numKvHeads }],
    [`${a}.attention.key_length`, { type: 'u32', value: c.headDim }],
    [`${a}.attention.value_length`, { type: 'u32', value: c.headDim }],
    [`${a}.rope.dimension_count`, { type: 'u32', value: c.headDim }],
    [`${a}.rope.freq_base`, { type: 'f32', value: c.ropeTheta }],
    [`${a}.attention.layer_norm_rms_epsilon`, { type: 'f32', value: c.rmsNormEps }],
  ];
  if (a === 'phi3') {
    // as convert_hf_to_gguf.py's Phi3MiniModel
    if (c.slidingWindow !== null) meta.push(['phi3.attention.sliding_window', { type: 'u32', value: c.slidingWindow }]);
  }
  if (moe) {
    meta.push([`${a}.expert_count`, { type: 'u32', value: moe.numExperts }], [`${a}.expert_used_count`, { type: 'u32', value: moe.topK }]);
    if (a === 'qwen3moe') meta.push([`${a}.expert_feed_forward_length`, { type: 'u32', value: moe.expertIntermediateSize }]);
  }
  const extra: { name: string; type: GgmlTypeName; shape: number[]; data: Uint8Array }[] = [];
  const rs = c.ropeScaling;
  if (rs?.type === 'llama3') {
    // as convert_hf_to_gguf.py: Llama 3's scaling as a tensor of per-frequency divisors
    const factors = new Float32Array(c.headDim / 2).map((_, i) => {
      const wavelen = 2 * Math.PI * c.ropeTheta ** ((2 * i) / c.headDim);
      const orig = rs.originalMaxPositionEmbeddings;
      if (wavelen < orig / rs.highFreqFactor) return 1;
      if (wavelen > orig / rs.lowFreqFactor) return rs.factor;
      const smooth = (orig / wavelen - rs.lowFreqFactor) / (rs.highFreqFactor - rs.lowFreqFactor);
      return 1 / ((1 - smooth) / rs.factor + smooth);
    });
    extra.push({ name: 'rope_freqs.weight', type: 'F32', shape: [factors.length], data: quantize('F32', factors) });
    meta.push([`${a}.rope.scaling.original_context_length`, { type: 'u32', value: rs.originalMaxPositionEmbeddings }]);
  } else if (rs !== null) {
    meta.push([`${a}.rope.scaling.type`, { type: 'string', value: rs.type }], [`${a}.rope.scaling.factor`, { type: 'f32', value: rs.factor }]);
    if (rs.type === 'yarn') {
      meta.push([`${a}.rope.scaling.original_context_length`, { type: 'u32', value: rs.originalMaxPositionEmbeddings }]);
    }
  }
  const tokConfigFile = join(m.tokenizerDir, 'tokenizer_config.json');
  const tokConfig = existsSync(tokConfigFile) ? readJsonFile(tokConfigFile) : {};
  meta.push(...tokenizerMetadata(readJsonFile(join(m.tokenizerDir, 'tokenizer.json')), {
    bos: m.generation.bosTokenId, eos: m.tokenizer.eosTokenIds[0] ?? null, addBos: tokConfig.add_bos_token === true,
    chatTemplate: m.chatTemplate, vocabSize: c.vocabSize }));
  const experts = new Map<string, TensorJob>();  // a stacked tensor's job, by its GGUF name
  const jobs = m.weights.names().flatMap((hf): TensorJob[] => {
    const stacked = expertPart(hf, c.architecture);
    const { shape } = m.weights.info(hf);
    if (stacked !== null) {
      const job = experts.get(stacked.name);
      if (job) {
        job.parts![stacked.expert] = hf;
        return [];
      }
      const j: TensorJob = { hf, name: stacked.name, type: tensorType(q, stacked.name, 3, shape.at(-1)!),
        shape: [moe!.numExperts, ...shape], permuteHeadDim: null, parts: [] };
      j.parts![stacked.expert] = hf;
      experts.set(stacked.name, j);
      return [j];
    }
    const name = ggufTensorName(hf, c.architecture) ?? routerName(hf, c.architecture);
    if (name === null) throw new Error(`gguf-convert: no GGUF name for tensor ${hf}`);
    const permuted = ggufPermutesQk(a) && /self_attn\.[qk]_proj\.(weight|bias)$/.test(hf);
    return [{ hf, name, type: tensorType(q, name, shape.length, shape.at(-1)!), shape, permuteHeadDim: permuted ? c.headDim : null }];
  });
  for (const j of experts.values()) {
    if (j.parts!.length !== moe!.numExperts || j.parts!.some((p) => p === undefined)) throw new Error(`gguf-convert: ${j.name} lacks experts`);
  }
  return { dir: m.dir, weights: m.weights, meta, extra, jobs };
}

/** config.json's model_type -> llama.cpp's general.architecture (Mixtral is llama with experts). */
const GGUF_ARCH: Record<string, string> = { qwen3: 'qwen3', qwen2: 'qwen2', llama: 'llama', qwen3_moe: 'qwen3moe', mixtral: 'llama',
  phi3: 'phi3' };

/** An expert's projection `hf` -> the stacked GGUF tensor it is slab `expert` of, or null. */
function expertPart(hf: string, architecture: string): { name: string; expert: number } | null {
  const moe = moeTensorNames(architecture);
  const m = /^model\.layers\.(\d+)\.(.+)\.weight$/.exec(hf);
  if (moe === null || m === null) return null;
  for (const [g, module] of Object.entries(moe.experts)) {
    const e = new RegExp(`^${module.replace(/\./g, '\\.').replace('{e}', '(\\d+)')}$`).exec(m[2]!);
    if (e) return { name: `blk.${m[1]}.${g}.weight`, expert: Number(e[1]) };
  }
  return null;
}

/** A mixture of experts' router `hf` -> ffn_gate_inp, or null. */
function routerName(hf: string, architecture: string): string | null {
  const moe = moeTensorNames(architecture);
  const m = /^model\.layers\.(\d+)\.(.+)\.weight$/.exec(hf);
  return moe !== null && m !== null && m[2] === moe.router ? `blk.${m[1]}.ffn_gate_inp.weight` : null;
}

if (isMainThread && process.argv[1] !== undefined && import.meta.url === pathToFileURL(resolve(process.argv[1])).href) {
  const [dir, file, type, threads] = process.argv.slice(2);
  if (dir === undefined || file === undefined || !(GGUF_QUANTIZATIONS as readonly string[]).includes(type ?? '')) {
    console.error(`usage: gguf-convert.js <model dir> <out.gguf> <${GGUF_QUANTIZATIONS.join(' | ')}> [threads]`);
    process.exit(2);
  }
  const t0 = Date.now();
  modelDirToGgufParallel(dir, file, type as GgufQuantization, threads === undefined ? undefined : Number(threads))
    .then(() => console.log(`${file}: ${dir} as ${type}, ${((Date.now() - t0) / 1000).toFixed(1)} s`))
    .catch((err: unknown) => {
      console.error(err instanceof Error ? err.message : String(err));
      process.exit(1);
    });
}
