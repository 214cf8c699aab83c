// Prefill attention kernel benchmark: 32 prompts x 2048 tokens in one batch, the
// attention shape of Qwen3-8B (32 q heads, 8 kv heads, head dim 128), pages of
// 16. Times the tensor-core kernel the engine runs (and, with --variants, other
// instantiations of it, interleaved) with CUDA events, and reports achieved
// TFLOP/s (causal: 4 * sum over rows of visible keys * D * numHeads).
//
//   node dist/src/lab/bench-prefill.js [--prompts 32] [--tokens 2048] [--reps 5] [--heads 32/8]
//     [--variants _x,_y]
//   node dist/src/lab/bench-prefill.js --digest    (the kernel's bits on fixed batches, as sha256)

import { createHash } from 'node:crypto';
import { pathToFileURL } from 'node:url';
import { Command } from 'commander';
import type { ForwardBatch } from '../backend/batch.js';
import { Device } from '../backend/cuda/device.js';
import { seededRandom } from '../model/random-weights.js';
import { EventTimer } from '../backend/cuda/event-timer.js';
import { PrefillHarness, prefillFlops } from './prefill-harness.js';

export const PREFILL_BENCH = { numHeads: 32, numKvHeads: 8, headDim: 128, blockSize: 16 } as const;

/** `numSeqs` prompts of `numTokens` tokens from position 0, each on its own run of pages. */
export function prefillBatch(numSeqs: number, numTokens: number, blockSize: number): ForwardBatch {
  const pagesPerSeq = Math.ceil(numTokens / blockSize);
  const total = numSeqs * numTokens;
  const b: ForwardBatch = {
    numTokens: total, numSeqs, inputIds: new Int32Array(total), positions: new Int32Array(total),
    slotMapping: new Int32Array(total), queryStartLoc: new Int32Array(numSeqs + 1), seqLens: new Int32Array(numSeqs),
    blockTables: new Int32Array(numSeqs * pagesPerSeq), maxBlocksPerSeq: pagesPerSeq, logitsIndices: new Int32Array(0),
  };
  for (let s = 0; s < numSeqs; s++) {
    b.queryStartLoc[s + 1] = (s + 1) * numTokens;
    b.seqLens[s] = numTokens;
    for (let p = 0; p < pagesPerSeq; p++) b.blockTables[s * pagesPerSeq + p] = s * pagesPerSeq + p;
    for (let i = 0; i < numTokens; i++) {
      const t = s * numTokens + i;
      b.positions[t] = i;
      b.slotMapping[t] = s * pagesPerSeq * blockSize + i;
    }
  }
  return b;
}

/** Batches whose prefill outputs pin the kernel's bits: [prompts, tokens each, q heads, kv heads] (D 128, pages of 16). */
export const DIGEST_CASES: readonly (readonly [number, number, number, number])[] =
  [[8, 777, 32, 8], [8, 777, 16, 8], [4, 300, 8, 8], [6, 1500, 32, 4]];

/**
 * sha256 (16 hex digits) of the engine's tensor-core prefill output on each DIGEST_CASES batch, every
 * prompt the same seeded bf16 rows in [-3, 3): a kernel change that alters any bit alters a digest (the
 * transcripts' md5 only show bits that flip a token).
 */
export function prefillDigests(device: Device): string[] {
  const { headDim, blockSize } = PREFILL_BENCH;
  return DIGEST_CASES.map(([numSeqs, numTokens, numHeads, numKvHeads]) => {
    const batch = prefillBatch(numSeqs, numTokens, blockSize);
    const h = new PrefillHarness(device, batch, { numHeads, numKvHeads, headDim, blockSize,
      numBlocks: batch.numSeqs * batch.maxBlocksPerSeq });
    try {
      const rand = seededRandom(11);
      const rows = Float32Array.from({ length: numTokens * h.qkvWidth }, () => 6 * rand() - 3);
      for (let s = 0; s < numSeqs; s++) h.uploadQkvRows(s * numTokens, rows);
      h.writeKv();
      h.poisonOut();
      h.run(1 / Math.sqrt(headDim));
      const out = h.readOut();
      return createHash('sha256').update(new Uint8Array(out.buffer, out.byteOffset, out.byteLength)).digest('hex')
        .slice(0, 16);
    } finally {
      h.dispose();
    }
  });
}

export interface PrefillBenchResult {
  device: string;
  kernel: string;
  ms: number;
  tflops: number;
}

export function runPrefillBench(numSeqs: number, numTokens: number, numReps: number, mmaSuffixes: string[] = [],
  log: (line: string) => void = console.log, heads: { numHeads: number; numKvHeads: number } = PREFILL_BENCH):
  PrefillBenchResult[] {
  const { headDim, blockSize } = PREFILL_BENCH;
  const { numHeads, numKvHeads } = heads;
  const device = new Device(0);
  const timer = new EventTimer(device);
  const batch = prefillBatch(numSeqs, numTokens, blockSize);
  const harness = new PrefillHarness(device, batch, { numHeads, numKvHeads, headDim, blockSize,
    numBlocks: batch.numSeqs * batch.maxBlocksPerSeq });
  try {
    const rand = seededRandom(7);
    const prompt = Float32Array.from({ length: numTokens * harness.qkvWidth }, () => 4 * rand() - 2);
    for (let s = 0; s < numSeqs; s++) harness.uploadQkvRows(s * numTokens, prompt);
    harness.writeKv();
    const scale = 1 / Math.sqrt(headDim);
    const flops = prefillFlops(batch, numHeads, headDim);
    const kernels: [string, string | undefined][] = [['tensor-core (mma.sync, 64-row tiles)', undefined],
      ...mmaSuffixes.map((suffix): [string, string] => [`tensor-core variant ${suffix}`, suffix])];
    const results: PrefillBenchResult[] = kernels.map(([kernel]) => ({ device: device.name, kernel, ms: Infinity,
      tflops: 0 }));
    for (let round = 0; round < 2; round++) {
      kernels.forEach(([, suffix], i) => {
        const ms = timer.time(numReps, () => harness.run(scale, suffix));
        if (ms < results[i]!.ms) results[i] = { ...results[i]!, ms, tflops: flops / (ms / 1000) / 1e12 };
      });
    }
    harness.run(scale);
    const all = harness.readOut();
    log(`${device.name}: ${numSeqs} x ${numTokens} tokens, ${numHeads} q heads, ${numKvHeads} kv heads, D ${headDim}, ` +
      `${(flops / 1e12).toFixed(2)} TFLOP causal`);
    for (const r of results) log(`  ${r.kernel}: ${r.ms.toFixed(2)} ms, ${r.tflops.toFixed(1)} TFLOP/s`);
    for (const suffix of mmaSuffixes) {  // the same arithmetic in every instantiation: the same bits
      harness.poisonOut();
      harness.run(scale, suffix);
      const v = harness.readOut();
      let differ = 0;
      for (let i = 0; i < v.length; i++) if (!Object.is(v[i], all[i])) differ++;
      log(`  variant ${suffix}: ${differ} of ${v.length} outputs differ from the default's`);
    }
    return results;
  } finally {
    timer.dispose();
    harness.dispose();
    device.dispose();
  }
}

async function main(argv: string[]): Promise<void> {
  const program = new Command('quire-bench-prefill')
    .description('prefill attention kernel (tensor cores) in TFLOP/s, and its instantiations side by side')
    .option('--prompts <n>', 'prompts in the batch', '32')
    .option('--tokens <n>', 'tokens per prompt', '2048')
    .option('--reps <n>', 'timed launches per kernel and round', '5')
    .option('--heads <q/kv>', 'query and kv heads', `${PREFILL_BENCH.numHeads}/${PREFILL_BENCH.numKvHeads}`)
    .option('--digest', 'print the sha256 of the engine kernel\'s output on the fixed digest batches, and exit')
    .option('--variants <list>', 'also time the instantiations attention_prefill_bf16_d128<suffix>, ' +
      'comma-separated suffixes (attention-launch.ts lists them)', '')
    .parse(argv);
  const o = program.opts<{ prompts: string; tokens: string; reps: string; variants: string; heads: string;
    digest?: boolean }>();
  if (o.digest) {
    const device = new Device(0);
    try {
      prefillDigests(device).forEach((sha, i) => {
        const [seqs, tokens, q, kv] = DIGEST_CASES[i]!;
        console.log(`${device.name} sm_${device.arch}: ${seqs} x ${tokens} tokens, ${q}/${kv} heads: ${sha}`);
      });
    } finally {
      device.dispose();
    }
    return;
  }
  const [numHeads, numKvHeads] = o.heads.split('/').map(Number) as [number, number];
  const results = runPrefillBench(Number(o.prompts), Number(o.tokens), Number(o.reps),
    o.variants.split(',').filter((v) => v.length > 0), console.log, { numHeads, numKvHeads });
  console.log(JSON.stringify(results));
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) await main(process.argv);
