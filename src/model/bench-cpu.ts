// Prefill and decode throughput of the forward pass on the CPU backend.
//
//   node dist/src/model/bench-cpu.js --shape tiny|qwen3-0.6b [--threads N] [--kernel wasm|js]
//   node dist/src/model/bench-cpu.js --shapes shared/bench/shapes.json --shape llama-3.2-1b
//   node dist/src/model/bench-cpu.js --model DIR [--prompt-len 64 --decode-steps 4 --batch 1]
// --shape runs random weights of that shape; --model runs a checkpoint.
//
// Prefill: one forward over batch x promptLen tokens. Decode: decodeSteps forwards
// of one token per sequence. Achieved GFLOP/s counts the matmuls (2 flops per
// weight per token, lm_head only on logit rows) and leaves attention out.

import { parseArgs } from 'node:util';
import { pathToFileURL } from 'node:url';
import { CpuBackend } from '../backend/cpu/cpu-backend.js';
import { readFileSync } from 'node:fs';
import { parseModelConfig } from '../loader/config.js';
import { loadModel } from '../loader/model-dir.js';
import type { ModelConfig, WeightSource } from '../loader/types.js';
import type { ForwardBatch } from '../backend/batch.js';
import { Model } from './model.js';
import { qwen3_0_6bConfig, randomWeightSource, tinyConfig } from './random-weights.js';

export interface CpuBenchOptions {
  config: ModelConfig;
  weights: WeightSource;
  numThreads?: number;
  kernel?: 'wasm' | 'js';
  promptLen?: number;
  numDecodeSteps?: number;
  batchSize?: number;
  blockSize?: number;
}

export interface CpuBenchResult {
  numThreads: number;
  kernel: 'wasm' | 'js';
  loadMs: number;
  prefillMs: number;
  prefillTokensPerS: number;
  prefillGflopsPerS: number;
  decodeMsPerStep: number;
  decodeTokensPerS: number;
  decodeGflopsPerS: number;
}

function layerMatmulWeights(c: ModelConfig): number {
  const qkv = (c.numHeads + 2 * c.numKvHeads) * c.headDim * c.hiddenSize;
  const o = c.hiddenSize * c.numHeads * c.headDim;
  return c.numLayers * (qkv + o + 3 * c.intermediateSize * c.hiddenSize);
}

/** Sequences laid out on consecutive pages; chunk [start, start + len) of each. */
function benchBatch(batchSize: number, start: number, len: number, pagesPerSeq: number, blockSize: number,
  vocabSize: number): ForwardBatch {
  const numTokens = batchSize * len;
  const b: ForwardBatch = {
    numTokens, numSeqs: batchSize, inputIds: new Int32Array(numTokens), positions: new Int32Array(numTokens),
    slotMapping: new Int32Array(numTokens), queryStartLoc: new Int32Array(batchSize + 1),
    seqLens: new Int32Array(batchSize).fill(start + len), blockTables: new Int32Array(batchSize * pagesPerSeq),
    maxBlocksPerSeq: pagesPerSeq, logitsIndices: new Int32Array(batchSize),
  };
  for (let s = 0; s < batchSize; s++) {
    for (let p = 0; p < pagesPerSeq; p++) b.blockTables[s * pagesPerSeq + p] = s * pagesPerSeq + p;
    b.queryStartLoc[s] = s * len;
    for (let j = 0; j < len; j++) {
      const t = s * len + j;
      const pos = start + j;
      b.inputIds[t] = (t * 7919 + 13) % vocabSize;
      b.positions[t] = pos;
      b.slotMapping[t] = (s * pagesPerSeq + Math.floor(pos / blockSize)) * blockSize + (pos % blockSize);
    }
    b.logitsIndices[s] = (s + 1) * len - 1;
  }
  b.queryStartLoc[batchSize] = numTokens;
  return b;
}

export function benchCpu(opts: CpuBenchOptions): CpuBenchResult {
  const { config } = opts;
  const promptLen = opts.promptLen ?? 64;
  const numDecodeSteps = opts.numDecodeSteps ?? 4;
  const batchSize = opts.batchSize ?? 1;
  const blockSize = opts.blockSize ?? 16;
  const pagesPerSeq = Math.ceil((promptLen + numDecodeSteps) / blockSize);
  const numBlocks = batchSize * pagesPerSeq;
  const kvBytes = 2 * config.numLayers * numBlocks * blockSize * config.numKvHeads * config.headDim * 4;
  const backend = new CpuBackend({ kvCacheBytes: kvBytes, numThreads: opts.numThreads, kernel: opts.kernel });
  try {
    const t0 = performance.now();
    const model = Model.load(config, opts.weights, backend);
    backend.allocateKvCache(model.kvCacheSpec(numBlocks, blockSize));
    const t1 = performance.now();
    model.forward(benchBatch(1, 0, Math.min(8, promptLen), pagesPerSeq, blockSize, config.vocabSize));
    model.forward(benchBatch(1, Math.min(8, promptLen), 1, pagesPerSeq, blockSize, config.vocabSize));
    const tWarm = performance.now();
    model.forward(benchBatch(batchSize, 0, promptLen, pagesPerSeq, blockSize, config.vocabSize));
    const t2 = performance.now();
    for (let i = 0; i < numDecodeSteps; i++) {
      model.forward(benchBatch(batchSize, promptLen + i, 1, pagesPerSeq, blockSize, config.vocabSize));
    }
    const t3 = performance.now();
    const layerWeights = layerMatmulWeights(config);
    const headWeights = config.vocabSize * config.hiddenSize;
    const prefillFlops = 2 * (layerWeights * batchSize * promptLen + headWeights * batchSize);
    const decodeFlops = 2 * (layerWeights + headWeights) * batchSize * numDecodeSteps;
    const decodeMs = t3 - t2;
    return {
      numThreads: backend.numThreads,
      kernel: backend.kernel,
      loadMs: t1 - t0,
      prefillMs: t2 - tWarm,
      prefillTokensPerS: (batchSize * promptLen) / ((t2 - tWarm) / 1000),
      prefillGflopsPerS: prefillFlops / ((t2 - tWarm) * 1e6),
      decodeMsPerStep: decodeMs / Math.max(1, numDecodeSteps),
      decodeTokensPerS: (batchSize * numDecodeSteps) / (decodeMs / 1000),
      decodeGflopsPerS: decodeFlops / (decodeMs * 1e6),
    };
  } finally {
    backend.dispose();
  }
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      model: { type: 'string' },
      shape: { type: 'string', default: 'tiny' },
      shapes: { type: 'string' },
      threads: { type: 'string' },
      kernel: { type: 'string' },
      'prompt-len': { type: 'string', default: '64' },
      'decode-steps': { type: 'string', default: '4' },
      batch: { type: 'string', default: '1' },
    },
  });
  let config: ModelConfig;
  let weights: WeightSource;
  if (values.model) {
    // a model directory or a GGUF file
    ({ config, weights } = await loadModel(values.model));
  } else {
    const shapes: Record<string, () => ModelConfig> = {
      tiny: () => tinyConfig('qwen3', { hiddenSize: 256, intermediateSize: 768, numLayers: 4, vocabSize: 4096, headDim: 32, numHeads: 8, numKvHeads: 4 }),
      'qwen3-0.6b': () => qwen3_0_6bConfig('bf16'),
    };
    if (values.shapes) {
      const table = JSON.parse(readFileSync(values.shapes, 'utf8')) as Record<string, unknown>;
      const entry = table[values.shape!];
      if (entry === undefined) throw new Error(`${values.shapes} has no shape ${values.shape}`);
      config = parseModelConfig(entry, values.shapes);
    } else {
      const make = shapes[values.shape!];
      if (!make) throw new Error(`--shape must be one of ${Object.keys(shapes).join(', ')}, or name one in --shapes FILE`);
      config = make();
    }
    weights = randomWeightSource(config);
  }
  const result = benchCpu({
    config, weights, numThreads: values.threads ? Number(values.threads) : undefined,
    kernel: values.kernel as 'wasm' | 'js' | undefined,
    promptLen: Number(values['prompt-len']), numDecodeSteps: Number(values['decode-steps']), batchSize: Number(values.batch),
  });
  const f = (x: number): string => x.toFixed(1);
  console.log(`${values.model ?? values.shape}: kernel=${result.kernel} threads=${result.numThreads} load ${f(result.loadMs)} ms`);
  console.log(`  prefill ${f(result.prefillTokensPerS)} tok/s (${f(result.prefillMs)} ms, ${f(result.prefillGflopsPerS)} GFLOP/s)`);
  console.log(`  decode  ${f(result.decodeTokensPerS)} tok/s (${f(result.decodeMsPerStep)} ms/step, ${f(result.decodeGflopsPerS)} GFLOP/s)`);
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) await main();
