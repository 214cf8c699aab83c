// bf16 GEMM benchmark: cuBLASLt's candidate algorithms for y[T, N] = x[T, K] w[N, K]^T, each timed with CUDA events,
// beside the engine's choice. Session 46's profile of qwen3.5-27b's graphed 128-row decode step put its down GEMMs
// (N 5120, K 17408) at 25.2 of its 83.8 ms: from 128 rows the engine asks for algorithms that sum K in one chain
// (ffi/cublaslt.ts, the bits it promises), and the heuristic's first such pick there is far from its best. This tool
// shows what each single-chain candidate and each of the heuristic's own (split-K allowed) gives, beside the engine's
// pick untuned and tuned (gemm-tune.ts), per shape, as TFLOP/s and as the rate its weight bytes would be read at.
//
//   node dist/src/lab/bench-gemm.js --shapes 5120:17408,34816:5120 [--tokens 64,128,256] [--reps 20] [--max 8]

import { pathToFileURL } from 'node:url';
import { Command } from 'commander';
import { Device } from '../backend/cuda/device.js';
import { Gemm, SINGLE_CHAIN_MIN_TOKENS } from '../backend/cuda/ffi/cublaslt.js';
import { EventGemmTuner } from '../backend/cuda/gemm-tune.js';
import { EventTimer } from '../backend/cuda/event-timer.js';
import { bf16Pattern } from './bench-moe.js';

export interface GemmBenchRow {
  T: number;
  N: number;
  K: number;
  /** engine (the algorithm Gemm.run takes untuned), tuned (gemm-tune.ts), single i / free i (the heuristic's i-th). */
  path: string;
  splitK: number;
  waves: number;
  ms: number;
  tflops: number;
}

/** Parses --shapes: N:K pairs, comma-separated. */
export function parseShapes(text: string): [number, number][] {
  return text.split(',').filter((s) => s !== '').map((s) => {
    const m = /^(\d+):(\d+)$/.exec(s.trim());
    if (!m) throw new Error(`bench-gemm: --shapes: '${s}' is not N:K`);
    return [Number(m[1]), Number(m[2])];
  });
}

/** A device buffer of bf16Pattern's values. */
function bf16Buffer(device: Device, count: number, seed: number, a: number): bigint {
  const p = device.alloc(count * 2);
  device.upload(p, bf16Pattern(count, seed, a));
  return p;
}

export function runGemmBench(device: Device, shapes: [number, number][], tokens: number[], numReps: number,
  max: number): GemmBenchRow[] {
  const wsBytes = 64 << 20;
  const ws = device.alloc(wsBytes);
  const engine = new Gemm(ws, wsBytes);
  const tuner = new EventGemmTuner(device, Number.MAX_SAFE_INTEGER);
  const tuned = new Gemm(ws, wsBytes, 'block', SINGLE_CHAIN_MIN_TOKENS, tuner);
  const timer = new EventTimer(device);
  const rows: GemmBenchRow[] = [];
  const buffers: bigint[] = [];
  try {
    for (const [N, K] of shapes) {
      const Tmax = Math.max(...tokens);
      const [w, x, y] = [bf16Buffer(device, N * K, 1, 2 / Math.sqrt(K)), bf16Buffer(device, Tmax * K, 2, 1),
        device.alloc(Tmax * N * 2)];
      buffers.push(w, x, y);
      for (const T of tokens) {
        const flops = 2 * T * N * K;
        const time = (path: string, splitK: number, waves: number, launch: () => void): void => {
          let ms = Infinity;
          for (let round = 0; round < 3; round++) ms = Math.min(ms, timer.time(numReps, launch));
          rows.push({ T, N, K, path, splitK, waves, ms, tflops: flops / (ms / 1000) / 1e12 });
        };
        time('engine', engine.splitOf(T, N, K).splitK, NaN, () => engine.run(x, w, y, T, N, K, device.stream));
        time('tuned', NaN, NaN, () => tuned.run(x, w, y, T, N, K, device.stream));
        for (const kind of ['single', 'free'] as const) {
          engine.candidates(T, N, K, kind === 'single', max).forEach((c, i) => time(`${kind} ${i}`, c.splitK, c.waves,
            () => engine.runAlgo(c.algo, x, w, y, T, N, K, device.stream)));
        }
      }
    }
    return rows;
  } finally {
    device.synchronize();
    for (const b of buffers) device.free(b);
    timer.dispose();
    engine.dispose();
    tuned.dispose();
    tuner.dispose();
    device.free(ws);
  }
}

async function main(argv: string[]): Promise<void> {
  const o = new Command('quire-bench-gemm')
    .description('cuBLASLt bf16 GEMM candidates per shape, timed with CUDA events')
    .option('--shapes <list>', 'N:K pairs (outputs : inputs), comma-separated', '5120:17408')
    .option('--tokens <list>', 'rows (T), comma-separated', '64,128,256')
    .option('--reps <n>', 'timed GEMMs a round (best of 3 rounds)', '20')
    .option('--max <n>', 'heuristic candidates asked for, each kind', '8')
    .parse(argv).opts<Record<'shapes' | 'tokens' | 'reps' | 'max', string>>();
  const ints = (s: string) => s.split(',').filter((v) => v !== '').map(Number);
  let shapes: [number, number][];
  try {
    shapes = parseShapes(o.shapes);
  } catch (e) {
    console.error((e as Error).message);
    process.exitCode = 2;
    return;
  }
  const device = new Device(0);
  try {
    for (const r of runGemmBench(device, shapes, ints(o.tokens), Number(o.reps), Number(o.max))) {
      console.log(`${device.name}: T ${r.T} N ${r.N} K ${r.K} ${r.path.padEnd(9)} split ${r.splitK} waves ` +
        `${r.waves.toFixed(2)}: ${r.ms.toFixed(4)} ms, ${r.tflops.toFixed(1)} TFLOP/s, weights at ` +
        `${(2 * r.N * r.K / (r.ms / 1000) / 1e12).toFixed(2)} TB/s`);
    }
  } finally {
    device.dispose();
  }
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) await main(process.argv);
