// Mixture-of-experts layer benchmark: the CUDA backend's moeExperts (router GEMM, routing, grouping, gate_up + silu,
// down, combine) on one layer of a model's shape, default qwen3-30b-a3b's (128 experts, top 8, hidden 2048, width
// 768), T tokens a step, timed with CUDA events. It reports the expert GEMMs' TFLOP/s (2 x 3 x H x I x T x k) and a
// digest of the layer's output bits, so two builds run in one device call compare speed and bits without a 57 GB model
// (`bench offline --workload prefill` needs one; docs/perf-log.md, session 40).
//
//   node dist/src/lab/bench-moe.js [--tokens 8192,2048] [--experts 128] [--top-k 8] [--hidden 2048] [--width 768]
//     [--reps 10] [--variants default,split_n4,wgmma] [--fp8]
//
// --variants times the layer on each named GEMM path in turn: `default` (the engine's plan), a gemm_rows variant for
// both GEMMs (moeVariantNames: the same bits as the default's tiled builds, so only the time may change), or `wgmma`
// (moe_wgmma.cu at any rows an expert, sm_90). --fp8: block-FP8 experts (the _fp8 builds, inputs quantized per 128
// columns), e4m3 bytes drawn as the bf16 ones are, one scale for every block; wgmma takes bf16 experts only.

import { createHash } from 'node:crypto';
import { pathToFileURL } from 'node:url';
import { Command } from 'commander';
import type { MoeExperts, MoeRoute } from '../backend/backend.js';
import { CudaBackend, type CudaTensor } from '../backend/cuda/cuda-backend.js';
import { GEMM_ROWS_VARIANTS, type GemmRowsVariant } from '../backend/cuda/gemm-rows.js';
import { f32ToBf16Bits } from '../loader/dtype.js';
import { e4m3Bits, roundE4m3 } from '../loader/fp8.js';
import { seededRandom } from '../model/random-weights.js';
import { prefillBatch } from './bench-prefill.js';
import { EventTimer } from '../backend/cuda/event-timer.js';

export interface MoeBenchShape {
  tokens: number;
  experts: number;
  topK: number;
  hidden: number;
  width: number;
  /** Block-FP8 experts (--fp8). */
  fp8?: boolean;
}

export interface MoeBenchResult extends MoeBenchShape {
  device: string;
  /** The GEMM path timed (--variants): `default`, a gemm_rows variant's name, or `wgmma`. */
  path: string;
  ms: number;
  /** The expert GEMMs' FLOPs (gate_up and down of every routed pair) over the layer's time. */
  tflops: number;
  /** sha256 (16 hex digits) of the layer's output bits on the bench's seeded inputs. */
  digest: string;
}

/**
 * `count` bf16 values drawn from 4,096 seeded ones in [-a, a), laid out with an odd stride so rows differ: weights
 * for timing need no more randomness, and JS would take seconds to draw a layer's 400 M values one by one (the lab's
 * kernel benchmarks share it).
 */
export function bf16Pattern(count: number, seed: number, a: number): Uint16Array {
  const rand = seededRandom(seed);
  const pool = new Uint16Array(4096);
  for (let i = 0; i < pool.length; i++) pool[i] = f32ToBf16Bits((2 * rand() - 1) * a);
  const data = new Uint16Array(count);
  for (let i = 0; i < count; i++) data[i] = pool[Math.imul(i, 0x9e3779b1) >>> 20]!;
  return data;
}

/** A bf16 tensor of bf16Pattern's values. */
export function bf16Values(c: CudaBackend, shape: number[], seed: number, a: number): CudaTensor {
  const data = bf16Pattern(shape.reduce((x, y) => x * y, 1), seed, a);
  return c.upload({ name: 'bench', dtype: 'bf16', shape, data: new Uint8Array(data.buffer) }) as CudaTensor;
}

/** 4,096 seeded e4m3 codes of values in [-224, 224] (draws rounded to e4m3, as a checkpoint's quantizer does). */
export function e4m3Pool(seed: number): Uint8Array {
  const rand = seededRandom(seed);
  return Uint8Array.from({ length: 4096 }, () => e4m3Bits(roundE4m3((2 * rand() - 1) * 224)));
}

/**
 * A block-FP8 weight [n, K] of values in [-a, a): e4m3 bytes drawn from 4,096 seeded ones (of +-224, half e4m3's range)
 * as bf16Values draws, and every 128 x 128 block's scale a / 224. n and K are multiples of 128.
 */
function fp8Values(c: CudaBackend, [n, K]: [number, number], seed: number, a: number): CudaTensor {
  const pool = e4m3Pool(seed);
  const data = new Uint8Array(n * K);
  for (let i = 0; i < data.length; i++) data[i] = pool[Math.imul(i, 0x9e3779b1) >>> 20]!;
  const scales = new Float32Array((n / 128) * (K / 128)).fill(a / 224);
  return c.uploadFp8Block('bench-moe', [{ weight: { name: 'bench-moe.weight', dtype: 'f8_e4m3', shape: [n, K], data },
    scaleInv: { name: 'bench-moe.weight_scale_inv', dtype: 'f32', shape: [n / 128, K / 128],
      data: new Uint8Array(scales.buffer) } }]) as CudaTensor;
}

/** The bench's seeded layer: experts (bf16, or block FP8 with shape.fp8), router, route and T rows of input. */
export function moeBenchInputs(shape: MoeBenchShape, c: CudaBackend): { x: CudaTensor; router: CudaTensor;
  experts: MoeExperts; route: MoeRoute } {
  const { tokens: T, experts: E, topK, hidden: H, width: I } = shape;
  const values = shape.fp8 ? fp8Values : bf16Values;
  const experts: MoeExperts = { numExperts: E, intermediate: I,
    gateUp: values(c, [E * 2 * I, H], 1, 2 / Math.sqrt(H)), down: values(c, [E * H, I], 2, 2 / Math.sqrt(I)) };
  const router = c.fromHost([E, H], Float32Array.from({ length: E * H }, seededRandomFill(3, 3 / Math.sqrt(H))));
  const x = c.fromHost([T, H], Float32Array.from({ length: T * H }, seededRandomFill(4, 2)));
  return { x, router, experts, route: { topK, renormalize: true } };
}

/** sha256 (16 hex digits) of a tensor's values as the device gives them. */
export function outputDigest(c: CudaBackend, t: CudaTensor): string {
  const values = c.toHost(t);
  return createHash('sha256').update(new Uint8Array(values.buffer, values.byteOffset, values.byteLength)).digest('hex')
    .slice(0, 16);
}

const FP8_WGMMA = 'bench-moe: --variants: wgmma takes bf16 experts, not --fp8';

/** A gemm_rows variant's name for --variants: split_n1 .. split_n4, tiled_w2x2_m2_n2, ... */
export function moeVariantName(v: GemmRowsVariant): string {
  return v.kind === 'split' ? `split_n${v.nt}` : `tiled_w${v.wm}x${v.warps / v.wm}_m${v.mt}_n${v.nt}`;
}

/** Every name --variants takes: default, each gemm_rows variant's, wgmma. */
export function moeVariantNames(): string[] {
  return ['default', ...GEMM_ROWS_VARIANTS.map(moeVariantName), 'wgmma'];
}

/** What a --variants name sets on CudaMoe: the forced gemm_rows variant and the wgmma threshold. */
export function moePath(name: string, defaultWgmmaMinRows: number): { variant: GemmRowsVariant | undefined;
  wgmmaMinRows: number } {
  if (name === 'default') return { variant: undefined, wgmmaMinRows: defaultWgmmaMinRows };
  if (name === 'wgmma') return { variant: undefined, wgmmaMinRows: 1 };
  const variant = GEMM_ROWS_VARIANTS.find((v) => moeVariantName(v) === name);
  if (!variant) throw new Error(`bench-moe: --variants: unknown path '${name}' (${moeVariantNames().join(', ')})`);
  return { variant, wgmmaMinRows: 0 };
}

/**
 * One layer of `shape` timed on each of `paths` in turn (--variants), on one set of inputs (the 1.2 GB of a3b's
 * experts are drawn and uploaded once a shape); CudaMoe is left as it was.
 */
export function runMoeBench(shape: MoeBenchShape, numReps: number, c: CudaBackend,
  paths: readonly string[] = ['default']): MoeBenchResult[] {
  const { tokens: T, topK, hidden: H, width: I } = shape;
  const saved = { variant: c.moe.variant, wgmmaMinRows: c.moe.wgmmaMinRows };
  const chosen = paths.map((p) => moePath(p, saved.wgmmaMinRows));
  if (paths.includes('wgmma') && c.device.arch !== 90) throw new Error('bench-moe: wgmma needs an sm_90 device');
  if (paths.includes('wgmma') && shape.fp8) throw new Error(FP8_WGMMA);
  const { x, router, experts: ex, route } = moeBenchInputs(shape, c);
  const batch = prefillBatch(1, 1, 16);
  const layer = (): CudaTensor => {
    c.beginStep(batch);
    return c.moeExperts(x, router, ex, route) as CudaTensor;
  };
  const flops = 2 * 3 * H * I * T * topK;
  const timer = new EventTimer(c.device);
  try {
    return paths.map((path, i) => {
      Object.assign(c.moe, chosen[i]);
      const digest = outputDigest(c, layer());  // the first layer also compiles its kernels and sizes the workspace
      let best = Infinity;
      for (let round = 0; round < 3; round++) best = Math.min(best, timer.time(numReps, layer));
      return { ...shape, device: c.device.name, path, ms: best, tflops: flops / (best / 1000) / 1e12, digest };
    });
  } finally {
    timer.dispose();
    Object.assign(c.moe, saved);
  }
}

function seededRandomFill(seed: number, a: number): () => number {
  const rand = seededRandom(seed);
  return () => (2 * rand() - 1) * a;
}

async function main(argv: string[]): Promise<void> {
  const o = new Command('quire-bench-moe')
    .description('one mixture-of-experts layer on CUDA (moeExperts): ms, expert TFLOP/s and the output bits\' digest')
    .option('--tokens <list>', 'tokens a step, comma-separated (one layer timed for each)', '8192')
    .option('--experts <n>', 'experts', '128')
    .option('--top-k <n>', 'experts a token', '8')
    .option('--hidden <n>', 'hidden size', '2048')
    .option('--width <n>', 'expert width (moe_intermediate_size)', '768')
    .option('--reps <n>', 'timed layers a round (best of 3 rounds)', '10')
    .option('--variants <list>', `GEMM paths timed in turn, comma-separated: ${moeVariantNames().join(', ')}`,
      'default')
    .option('--fp8', 'block-FP8 experts (sm_90)')
    .parse(argv).opts<Record<'tokens' | 'experts' | 'topK' | 'hidden' | 'width' | 'reps' | 'variants', string>
      & { fp8?: boolean }>();
  const paths = o.variants.split(',').filter((v) => v !== '');
  try {
    for (const p of paths) moePath(p, 0);  // a name it does not know fails before the device starts
    if (o.fp8 && paths.includes('wgmma')) throw new Error(FP8_WGMMA);
  } catch (e) {
    console.error((e as Error).message);
    process.exitCode = 2;
    return;
  }
  const c = new CudaBackend({});
  try {
    for (const tokens of o.tokens.split(',').map(Number)) {
      const shape = { tokens, experts: Number(o.experts), topK: Number(o.topK), hidden: Number(o.hidden),
        width: Number(o.width), fp8: o.fp8 === true };
      for (const r of runMoeBench(shape, Number(o.reps), c, paths)) {
        console.log(`${r.device}: ${r.tokens} tokens, ${r.experts} experts top ${r.topK}${r.fp8 ? ' fp8' : ''}, ` +
          `H ${r.hidden}, I ${r.width}, ${r.path}: ${r.ms.toFixed(3)} ms, ${r.tflops.toFixed(1)} expert TFLOP/s, ` +
          `output ${r.digest}`);
      }
    }
  } finally {
    c.dispose();
  }
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) await main(process.argv);
