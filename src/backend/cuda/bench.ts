// W2: single-stream greedy decode on the CUDA backend, by the difference method.
//   prompt 128 tokens, generate 64 and 320: decode rate = 256 / (t320 - t64)
// and the share of the bandwidth roofline it reaches: weight bytes read per
// step over the device-to-device copy bandwidth measured here (bytes read +
// written, as a copy moves them).
//
//   node dist/src/backend/cuda/bench.js --model <hf dir> | --random qwen3-0.6b [--enforce-eager] [--profile]

import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { Command } from 'commander';
import { loadModelConfig } from '../../loader/config.js';
import type { ModelConfig, WeightSource } from '../../loader/types.js';
import type { ForwardBatch } from '../../model/batch.js';
import { Model } from '../../model/model.js';
import { qwen3_0_6bConfig, randomWeightSource } from '../../model/random-weights.js';
import { CudaBackend, CudaTensor } from './cuda-backend.js';

export const W2 = { promptLen: 128, shortGen: 64, longGen: 320, blockSize: 16 } as const;

export interface W2Result {
  device: string;
  decodeTokensPerSec: number;
  t64Ms: number;
  t320Ms: number;
  weightBytesPerStep: number;
  copyBandwidthBytesPerSec: number;
  rooflineTokensPerSec: number;
  rooflineShare: number;
  graphs: boolean;
}

/** One sequence of one token per step: the decode batch. */
function decodeBatch(token: number, position: number, pages: Int32Array, blockSize: number): ForwardBatch {
  const block = pages[Math.floor(position / blockSize)]!;
  return {
    numTokens: 1, numSeqs: 1, inputIds: Int32Array.of(token), positions: Int32Array.of(position),
    slotMapping: Int32Array.of(block * blockSize + (position % blockSize)), queryStartLoc: Int32Array.of(0, 1),
    seqLens: Int32Array.of(position + 1), blockTables: pages, maxBlocksPerSeq: pages.length,
    logitsIndices: Int32Array.of(0),
  };
}

function prefillBatch(ids: number[], pages: Int32Array, blockSize: number): ForwardBatch {
  const n = ids.length;
  const positions = Int32Array.from({ length: n }, (_, i) => i);
  return {
    numTokens: n, numSeqs: 1, inputIds: Int32Array.from(ids), positions,
    slotMapping: positions.map((p) => pages[Math.floor(p / blockSize)]! * blockSize + (p % blockSize)),
    queryStartLoc: Int32Array.of(0, n), seqLens: Int32Array.of(n), blockTables: pages, maxBlocksPerSeq: pages.length,
    logitsIndices: Int32Array.of(n - 1),
  };
}

/** Wall time of prefill + `numGenerated` greedy decode steps. */
export function timeGeneration(model: Model, backend: CudaBackend, numGenerated: number): number {
  const { promptLen, blockSize } = W2;
  const numPages = Math.ceil((promptLen + numGenerated) / blockSize) + 1;
  const pages = Int32Array.from({ length: numPages }, (_, i) => i);
  const prompt = Array.from({ length: promptLen }, (_, i) => (i * 7919 + 13) % model.config.vocabSize);
  const start = performance.now();
  let token = model.forwardTokens(prefillBatch(prompt, pages, blockSize))[0]!;
  for (let i = 1; i < numGenerated; i++) {
    const batch = decodeBatch(token, promptLen + i - 1, pages, blockSize);
    token = backend.graph(1, batch, () => model.forwardTokens(batch))[0]!;
  }
  return performance.now() - start;
}

/** Device-to-device copy bandwidth, bytes read + written per second. */
export function copyBandwidth(backend: CudaBackend): number {
  return backend.copyBandwidth();
}

/** Bytes of weights one decode step reads: every layer, the final norm and the lm head (one embedding row aside). */
export function weightBytesPerStep(model: Model): number {
  const w = model.weights;
  const bytes = (t: unknown) => (t instanceof CudaTensor ? t.numBytes : 0);
  let total = bytes(w.finalNorm) + bytes(w.lmHead);
  for (const l of w.layers) {
    total += bytes(l.inputNorm) + bytes(l.qkv) + bytes(l.qNorm) + bytes(l.kNorm) + bytes(l.o) +
      bytes(l.postAttentionNorm) + bytes(l.gateUp) + bytes(l.down);
  }
  return total;
}

export function runW2(config: ModelConfig, weights: WeightSource, opts: { enforceEager: boolean; profile: boolean },
  log: (line: string) => void = console.log): W2Result {
  let lastProfile = '';
  const backend = new CudaBackend({ enforceEager: opts.enforceEager, profile: opts.profile,
    log: (text) => { lastProfile = text; } });
  try {
    const model = Model.load(config, weights, backend);
    const numPages = Math.ceil((W2.promptLen + W2.longGen) / W2.blockSize) + 1;
    backend.allocateKvCache(model.kvCacheSpec(numPages, W2.blockSize));
    timeGeneration(model, backend, 8);
    const t64 = [] as number[];
    const t320 = [] as number[];
    for (let rep = 0; rep < 2; rep++) {
      t64.push(timeGeneration(model, backend, W2.shortGen));
      t320.push(timeGeneration(model, backend, W2.longGen));
    }
    const t64Ms = Math.min(...t64);
    const t320Ms = Math.min(...t320);
    const decodeTokensPerSec = (W2.longGen - W2.shortGen) / ((t320Ms - t64Ms) / 1000);
    const weightBytes = weightBytesPerStep(model);
    const bandwidth = copyBandwidth(backend);
    const rooflineTokensPerSec = bandwidth / weightBytes;
    if (opts.profile) log(`last decode step profile:\n${lastProfile}`);
    return { device: backend.device.name, decodeTokensPerSec, t64Ms, t320Ms, weightBytesPerStep: weightBytes,
      copyBandwidthBytesPerSec: bandwidth, rooflineTokensPerSec, rooflineShare: decodeTokensPerSec / rooflineTokensPerSec,
      graphs: !opts.enforceEager };
  } finally {
    backend.dispose();
  }
}

async function main(argv: string[]): Promise<void> {
  const program = new Command('quire-bench-w2')
    .description('W2: single-stream greedy decode rate on CUDA (difference method) and share of the bandwidth roofline')
    .option('--model <dir>', 'Hugging Face model directory (config.json + safetensors)')
    .option('--random <shape>', 'random weights of a known shape instead of a checkpoint (qwen3-0.6b)')
    .option('--enforce-eager', 'no CUDA graphs', false)
    .option('--profile', 'per-op profile of the last decode step (a graph replay unless --enforce-eager)', false)
    .parse(argv);
  const o = program.opts<{ model?: string; random?: string; enforceEager: boolean; profile: boolean }>();
  let config: ModelConfig;
  let weights: WeightSource;
  if (o.model) {
    config = loadModelConfig(join(o.model, 'config.json'));
    const { openWeights } = await import('../../loader/model-dir.js');
    weights = openWeights(o.model);
  } else if (o.random === 'qwen3-0.6b') {
    config = qwen3_0_6bConfig();
    weights = randomWeightSource(config, { seed: 1 });
  } else {
    return program.error('give --model <dir> or --random qwen3-0.6b');
  }
  const r = runW2(config, weights, { enforceEager: o.enforceEager, profile: o.profile });
  console.log(`${r.device}: ${r.decodeTokensPerSec.toFixed(1)} tok/s decode (t64 ${r.t64Ms.toFixed(1)} ms, ` +
    `t320 ${r.t320Ms.toFixed(1)} ms, graphs ${r.graphs ? 'on' : 'off'}); weights ${(r.weightBytesPerStep / 1e9).toFixed(3)} GB/step, ` +
    `copy bandwidth ${(r.copyBandwidthBytesPerSec / 1e12).toFixed(2)} TB/s -> roofline ${r.rooflineTokensPerSec.toFixed(0)} tok/s, ` +
    `${(100 * r.rooflineShare).toFixed(1)}% of it`);
  console.log(JSON.stringify(r));
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) await main(process.argv);
