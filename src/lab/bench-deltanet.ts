// Gated DeltaNet decode benchmark: one layer's conv, rule and gated norm (Backend.causalConv1d, gatedDeltaRule with
// its gate) on S sequences of one token each, every one continuing a state in its own slot, timed with CUDA events,
// at qwen3.5-27b's shape unless told. Session 46's profile of that model's graphed decode steps put the rule at ~1 TB/s
// of state traffic from 72 rows on (49.9 ms of a 160-row step's 75.8): this times the builds that could change that
// without a 54 GB model, and prints the state's bytes (read and written) over the time, and a digest of the output
// bits (the builds promise the default's bits; bf16 states change them).
//
//   node dist/src/lab/bench-deltanet.js [--seqs 1,64,160] [--variants default,wide,fused-norm,fused-decode]
//     [--ssm f32,bf16] [--reps 20] [--key-heads 16 --value-heads 48 --key-dim 128 --value-dim 128 --conv 4]

import { createHash } from 'node:crypto';
import { pathToFileURL } from 'node:url';
import { Command } from 'commander';
import { convChannels, type DeltaNetShape, type SsmCacheDtype } from '../backend/backend.js';
import { CudaBackend, type CudaBackendOptions } from '../backend/cuda/cuda-backend.js';
import { buildForwardBatch } from '../engine/batch-builder.js';
import { EventTimer } from '../backend/cuda/event-timer.js';
import { bf16Values } from './bench-moe.js';

/** What each --variants name sets on the backend. */
export const DELTANET_VARIANTS: Record<string, CudaBackendOptions> = {
  'default': {},
  'wide': { deltanetWide: true },
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
  ms: number;
  /** State bytes read and written over the time, TB/s. */
  stateTbPerS: number;
  digest: string;
}

/** One layer's decode (conv, rule, gated norm) on `variant` with `ssm` states, at each of `seqs`, best of 3 rounds. */
export function runDeltanetBench(shape: DeltaNetShape, variant: string, ssm: SsmCacheDtype, seqs: readonly number[],
  numReps: number): DeltanetBenchRow[] {
  const c = new CudaBackend({ ...DELTANET_VARIANTS[variant], ssmCacheDtype: ssm });
  const timer = new EventTimer(c.device);
  try {
    const C = convChannels(shape);
    const { numValueHeads: Hv, valueDim: Dv, convKernel: K } = shape;
    const Smax = Math.max(...seqs);
    c.allocateRecurrentState({ numSlots: Smax, numLayers: 1, shape });
    const [w, aLog, dtBias, norm] = [bf16Values(c, [C, K], 1, 0.6), bf16Values(c, [Hv], 2, 1),
      bf16Values(c, [Hv], 3, 1), bf16Values(c, [Dv], 4, 1.5)];
    return seqs.map((S) => {
      // S sequences at position 512, one token each, sequence i in slot i (states of zeros: the time is the same)
      const batch = buildForwardBatch(Array.from({ length: S }, (_, i) => ({ tokenIds: [1], startPosition: 512,
        blockTable: Array.from({ length: 33 }, () => 0), sample: false, stateSlot: i })), 16);
      const [x, ba, z] = [bf16Values(c, [S, C], 5, 2), bf16Values(c, [S, 2 * Hv], 6, 3),
        bf16Values(c, [S, Hv * Dv], 7, 3)];
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
      return { variant, ssm, seqs: S, ms, stateTbPerS: stateBytesPerStep(shape, S, ssm) / (ms / 1000) / 1e12, digest };
    });
  } finally {
    timer.dispose();
    c.dispose();
  }
}

async function main(argv: string[]): Promise<void> {
  const o = new Command('quire-bench-deltanet')
    .description('one gated DeltaNet layer\'s decode (conv, rule, gated norm) on CUDA: ms, state TB/s, output digest')
    .option('--seqs <list>', 'sequences a step (one token each), comma-separated', '1,64,160')
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
  try {
    checkVariants(variants);
    for (const d of ssms) if (d !== 'f32' && d !== 'bf16') throw new Error(`bench-deltanet: --ssm: '${d}' (f32, bf16)`);
  } catch (e) {
    console.error((e as Error).message);
    process.exitCode = 2;
    return;
  }
  const shape: DeltaNetShape = { numKeyHeads: Number(o.keyHeads), numValueHeads: Number(o.valueHeads),
    keyDim: Number(o.keyDim), valueDim: Number(o.valueDim), convKernel: Number(o.conv) };
  const seqs = list(o.seqs!).map(Number);
  for (const ssm of ssms as SsmCacheDtype[]) {
    for (const v of variants) {
      for (const r of runDeltanetBench(shape, v, ssm, seqs, Number(o.reps))) {
        console.log(`${r.variant.padEnd(12)} ${r.ssm} states, ${String(r.seqs).padStart(4)} seqs: `
          + `${r.ms.toFixed(4)} ms, `
          + `state ${r.stateTbPerS.toFixed(2)} TB/s, output ${r.digest}`);
      }
    }
  }
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) await main(process.argv);
