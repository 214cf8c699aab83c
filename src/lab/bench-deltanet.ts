// Gated DeltaNet step benchmark: one layer's conv, rule and gated norm (Backend.causalConv1d, gatedDeltaRule with
// its gate) on S sequences of `--tokens` tokens each (1: a decode step), beside one prompt chunk of `--chunk` tokens
// (a mixed step; 0: none), every sequence continuing a state in its own slot, timed with CUDA events,
// at qwen3.5-27b's shape unless told. Session 46's profile of that model's graphed decode steps put the rule at ~1 TB/s
// of state traffic from 72 rows on (49.9 ms of a 160-row step's 75.8): this times the builds that could change that
// without a 54 GB model, and prints the state's bytes (read and written) over the time, and a digest of the output
// bits (the builds promise the default's bits; bf16 states change them).
//
//   node dist/src/lab/bench-deltanet.js [--seqs 1,64,160] [--tokens 1] [--chunk 0]
//     [--variants default,recurrent,wide,wide-chunks,one-launch,chunked,chunked32,chunked-mma,chunked32-mma,
//       fused-norm,fused-decode]
//     [--ssm f32,bf16]
//     [--reps 20]
//     [--key-heads 16 --value-heads 48 --key-dim 128 --value-dim 128 --conv 4]

import { createHash } from 'node:crypto';
import { pathToFileURL } from 'node:url';
import { Command } from 'commander';
import { convChannels, type DeltaNetShape, type SsmCacheDtype } from '../backend/backend.js';
import { CudaBackend, type CudaBackendOptions } from '../backend/cuda/cuda-backend.js';
import { buildForwardBatch, type ScheduledSeq } from '../engine/batch-builder.js';
import { EventTimer } from '../backend/cuda/event-timer.js';
import { bf16Values } from './bench-moe.js';

/** What each --variants name sets on the backend ('default': the engine's defaults, knobs included). */
export const DELTANET_VARIANTS: Record<string, CudaBackendOptions> = {
  'default': {},
  'recurrent': { deltanetWideMaxTokens: 0, deltanetChunkedFrom: 0 },
  'wide': { deltanetWideMaxTokens: 1, deltanetChunkedFrom: 0, deltanetOneLaunch: false },
  'wide-chunks': { deltanetWideMaxTokens: 2 ** 30, deltanetChunkedFrom: 0 },
  'one-launch': { deltanetWideMaxTokens: 1, deltanetOneLaunch: true, deltanetChunkedFrom: 0 },
  'chunked': { deltanetChunkedFrom: 2, deltanetChunk: 64 },
  'chunked32': { deltanetChunkedFrom: 2, deltanetChunk: 32 },
  'chunked-mma': { deltanetChunkedFrom: 2, deltanetChunk: 64, deltanetChunkedMma: true },
  'chunked32-mma': { deltanetChunkedFrom: 2, deltanetChunk: 32, deltanetChunkedMma: true },
  'fused-norm': { deltanetFusedNorm: true },
  'fused-decode': { deltanetFusedDecode: true },
};

export function checkVariants(names: readonly string[]): void {
  for (const n of names) {
    if (!(n in DELTANET_VARIANTS)) {
      const known = Object.keys(DELTANET_VARIANTS).join(', ');
      throw new Error(`bench-deltanet: --variants: unknown build '${n}' (${known})`);
    }
  }
}

/** Bytes of delta-rule state a decode step reads and writes for S sequences (the conv windows aside). */
export function stateBytesPerStep(shape: DeltaNetShape, S: number, ssm: SsmCacheDtype): number {
  return 2 * S * shape.numValueHeads * shape.keyDim * shape.valueDim * (ssm === 'bf16' ? 2 : 4);
}

export interface DeltanetBenchRow {
  variant: string;
  ssm: SsmCacheDtype;
  seqs: number;
  /** Tokens each of the `seqs` sequences has; a prompt chunk's beside them (0: none). */
  tokens: number;
  chunk: number;
  ms: number;
  /** State bytes read and written over the time, TB/s. */
  stateTbPerS: number;
  digest: string;
}

/** Page size of the bench's block tables (the rule reads no page: only their lengths must cover each row). */
const BENCH_BLOCK = 16;

/**
 * The step's sequences: `S` of `tokens` tokens at position 512, sequence i in slot i, then a prompt chunk of `chunk`
 * tokens (none for 0) from position 0 in slot S.
 */
export function benchSequences(S: number, tokens: number, chunk: number): ScheduledSeq[] {
  const row = (n: number, startPosition: number, stateSlot: number): ScheduledSeq => ({
    tokenIds: Array.from({ length: n }, () => 1), startPosition, sample: false, stateSlot,
    blockTable: Array.from({ length: Math.ceil((startPosition + n) / BENCH_BLOCK) }, () => 0) });
  return [...Array.from({ length: S }, (_, i) => row(tokens, 512, i)), ...(chunk > 0 ? [row(chunk, 0, S)] : [])];
}

/** One layer's step (conv, rule, gated norm) on `variant` with `ssm` states, at each of `seqs`, best of 3 rounds. */
export function runDeltanetBench(shape: DeltaNetShape, variant: string, ssm: SsmCacheDtype, seqs: readonly number[],
  numReps: number, tokens = 1, chunk = 0): DeltanetBenchRow[] {
  const c = new CudaBackend({ ...DELTANET_VARIANTS[variant], ssmCacheDtype: ssm });
  const timer = new EventTimer(c.device);
  try {
    const C = convChannels(shape);
    const { numValueHeads: Hv, valueDim: Dv, convKernel: K } = shape;
    const Smax = Math.max(...seqs);
    c.allocateRecurrentState({ numSlots: Smax + 1, numLayers: 1, shape });
    const [w, aLog, dtBias, norm] = [bf16Values(c, [C, K], 1, 0.6), bf16Values(c, [Hv], 2, 1),
      bf16Values(c, [Hv], 3, 1), bf16Values(c, [Dv], 4, 1.5)];
    return seqs.map((S) => {
      // states of zeros: the time is the same
      const batch = buildForwardBatch(benchSequences(S, tokens, chunk), BENCH_BLOCK);
      const T = batch.numTokens;
      const [x, ba, z] = [bf16Values(c, [T, C], 5, 2), bf16Values(c, [T, 2 * Hv], 6, 3),
        bf16Values(c, [T, Hv * Dv], 7, 3)];
      const layer = () => {
        const step = c.beginStep(batch);
        const conv = c.causalConv1d(x, w, 0, step);
        return c.gatedDeltaRule(conv, ba, aLog, dtBias, shape, 0, step, { z, w: norm, eps: 1e-6 });
      };
      const values = c.toHost(layer());
      const digest = createHash('sha256').update(new Uint8Array(values.buffer, values.byteOffset, values.byteLength))
        .digest('hex').slice(0, 16);
      let ms = Infinity;
      for (let round = 0; round < 3; round++) ms = Math.min(ms, timer.time(numReps, () => { layer(); }));
      const stateBytes = stateBytesPerStep(shape, S + (chunk > 0 ? 1 : 0), ssm);
      return { variant, ssm, seqs: S, tokens, chunk, ms, stateTbPerS: stateBytes / (ms / 1000) / 1e12, digest };
    });
  } finally {
    timer.dispose();
    c.dispose();
  }
}

/** A whole number of at least `min` for `flag`, or an error naming the flag and the value. */
export function countOption(flag: string, value: string, min: number): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < min) {
    throw new Error(`bench-deltanet: ${flag}: '${value}' (a whole number >= ${min})`);
  }
  return n;
}

async function main(argv: string[]): Promise<void> {
  const o = new Command('quire-bench-deltanet')
    .description('one gated DeltaNet layer\'s step (conv, rule, gated norm) on CUDA: ms, state TB/s, output digest')
    .option('--seqs <list>', 'sequences a step, comma-separated', '1,64,160')
    .option('--tokens <n>', 'tokens each of those sequences has (1: a decode step)', '1')
    .option('--chunk <n>', 'a prompt chunk of this many tokens beside them (a mixed step; 0: none)', '0')
    .option('--variants <list>', `builds, comma-separated: ${Object.keys(DELTANET_VARIANTS).join(', ')}`,
      'default,wide')
    .option('--ssm <list>', 'state dtypes: f32, bf16', 'f32')
    .option('--reps <n>', 'timed layers a round (best of 3 rounds)', '20')
    .option('--key-heads <n>', 'key heads', '16')
    .option('--value-heads <n>', 'value heads', '48')
    .option('--key-dim <n>', 'key head dim', '128')
    .option('--value-dim <n>', 'value head dim', '128')
    .option('--conv <n>', 'conv taps', '4')
    .parse(argv).opts<Record<string, string>>();
  const list = (s: string) => s.split(',').filter((v) => v !== '');
  const variants = list(o.variants!);
  const ssms = list(o.ssm!);
  let seqs: number[], tokens: number, chunk: number;
  try {
    checkVariants(variants);
    for (const d of ssms) if (d !== 'f32' && d !== 'bf16') throw new Error(`bench-deltanet: --ssm: '${d}' (f32, bf16)`);
    seqs = list(o.seqs!).map((v) => countOption('--seqs', v, 1));
    tokens = countOption('--tokens', o.tokens!, 1);
    chunk = countOption('--chunk', o.chunk!, 0);
  } catch (e) {
    console.error((e as Error).message);
    process.exitCode = 2;
    return;
  }
  const shape: DeltaNetShape = { numKeyHeads: Number(o.keyHeads), numValueHeads: Number(o.valueHeads),
    keyDim: Number(o.keyDim), valueDim: Number(o.valueDim), convKernel: Number(o.conv) };
  for (const ssm of ssms as SsmCacheDtype[]) {
    for (const v of variants) {
      for (const r of runDeltanetBench(shape, v, ssm, seqs, Number(o.reps), tokens, chunk)) {
        console.log(`${r.variant.padEnd(12)} ${r.ssm} states, ${String(r.seqs).padStart(4)} seqs of ${r.tokens}`
          + `${r.chunk > 0 ? ` + a ${r.chunk}-token chunk` : ''}: `
          + `${r.ms.toFixed(4)} ms, `
          + `state ${r.stateTbPerS.toFixed(2)} TB/s, output ${r.digest}`);
      }
    }
  }
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) await main(process.argv);
