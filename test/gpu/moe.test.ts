// The device's mixture of experts (Backend.moeExperts: kernels/moe.cu, moe.ts): its routing is routeTokens' (the same
// experts, weights within 2e-6), by moe_route and by the fused router (moe_router_fused: its logits within bf16
// rounding of the router GEMM's, and the batch-invariant mode's gemm_rows bits, so a row routes alike at any T); its
// outputs match the CPU backend's on the same bf16 inputs, on decode steps (the split variants) and prefill chunks
// (the tiled ones, and moe_wgmma.cu's on Hopper), at Qwen3-MoE's and Mixtral's expert counts and top-k with hidden
// sizes and widths off the tiles; a row's bits are the same alone as in a batch whose every row chose its experts, on
// every variant; the combine fused with the residual add and the norm (moeExpertsAddRmsNorm) has the two ops' bits; a
// decode step captured as a graph replays to the eager result when its tokens route elsewhere; a profile names the
// MoE buckets; the grouping's tile lists (one per GEMM tile height) are expertTileList's of its offsets; bench-moe
// digests the output it times, and its gemm_rows paths (--variants) give one digest; on Hopper the engine takes moe_wgmma.cu from QUIRE_MOE_WGMMA_MIN_ROWS rows an expert,
// never in the batch-invariant mode. CUDA outputs start as NaN. (Block-FP8 experts: moe-fp8.test.ts.)

import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import type { MoeExperts, MoeRoute } from '../../src/backend/backend.js';
import type { CpuBackend } from '../../src/backend/cpu/cpu-backend.js';
import type { CudaBackend, CudaTensor } from '../../src/backend/cuda/cuda-backend.js';
import { GEMM_ROWS_VARIANTS } from '../../src/backend/cuda/gemm-rows.js';
import { expertTileList, MOE_FUSED_ROUTER_MAX_ROWS, planMoe } from '../../src/backend/cuda/moe-plan.js';
import { routeTokens } from '../../src/backend/moe-route.js';
import { type MoeBenchResult, moeBenchInputs, moeVariantNames, outputDigest, runMoeBench }
  from '../../src/lab/bench-moe.js';
import { readKnob } from '../../src/knobs/knobs.js';
import { bf16ToF32, f32ToBf16 } from '../../src/loader/dtype.js';
import { batchOf } from '../backend/helpers.js';
import { assertBf16Close, assertSameBits, beginPoisonedStep, bitsOf, newCpu, newCuda, noCuda, randomBf16, rowsOf,
  rerunWith, uploadBoth } from './cuda-helpers.js';

/** Random experts of E x width I on hidden H, scaled so that every product stays near 1. */
function expertValues(E: number, H: number, I: number, seed: number): { gateUp: Float32Array; down: Float32Array } {
  return { gateUp: randomBf16(E * 2 * I * H, seed, -2 / Math.sqrt(H), 2 / Math.sqrt(H)),
    down: randomBf16(E * H * I, seed + 1, -2 / Math.sqrt(I), 2 / Math.sqrt(I)) };
}

function cudaExperts(c: CudaBackend, E: number, H: number, I: number, seed: number): MoeExperts {
  const v = expertValues(E, H, I, seed);
  return { numExperts: E, intermediate: I, gateUp: c.fromHost([E * 2 * I, H], v.gateUp), down: c.fromHost([E * H, I], v.down) };
}

/**
 * A router [E, H] whose logit e is 4 x[e] (E <= H): exact in any sum order, so the CPU's f32 logits and the device's
 * bf16 ones are equal and both route alike, ties included.
 */
function pickingRouter(E: number, H: number): Float32Array {
  const r = new Float32Array(E * H);
  for (let e = 0; e < E; e++) r[e * H + e] = 4;
  return r;
}

/** The exclusive scan of each expert's count among `experts`: the grouping's offsets [E + 1]. */
function offsetsOf(experts: Int32Array, E: number): number[] {
  const counts = new Array<number>(E).fill(0);
  for (const e of experts) counts[e]!++;
  const out = [0];
  for (const c of counts) out.push(out[out.length - 1]! + c);
  return out;
}

/** Each tile list the grouping wrote is expertTileList's for its offsets' counts (entry y: block y's work). */
function assertTileLists(got: { offsets: Int32Array; tiles: { tokens: number; list: Int32Array }[] }, E: number,
  what: string): void {
  const counts = Array.from({ length: E }, (_, e) => got.offsets[e + 1]! - got.offsets[e]!);
  for (const { tokens, list } of got.tiles) {
    assert.deepEqual(Array.from(list), Array.from(expertTileList(counts, tokens, list.length / 4)), `tiles of ${tokens} (${what})`);
  }
}

const oneToken = batchOf([{ ids: [1], start: 0, pages: [0] }], 16);

/** md5 of moeExperts' and moeExpertsAddRmsNorm's output bits on fixed inputs (7 rows, 128 experts, top 8). */
function combineCaseMd5(c: CudaBackend): string {
  const [T, E, k, H, I] = [7, 128, 8, 264, 96];
  const ex = cudaExperts(c, E, H, I, 60);
  const x = c.fromHost([T, H], randomBf16(T * H, 61));
  const router = c.fromHost([E, H], randomBf16(E * H, 62, -3 / Math.sqrt(H), 3 / Math.sqrt(H)));
  const route: MoeRoute = { topK: k, renormalize: true };
  const hash = createHash('md5');
  beginPoisonedStep(c);
  hash.update(bitsOf(c, c.moeExperts(x, router, ex, route)));
  beginPoisonedStep(c);
  const res = c.fromHost([T, H], randomBf16(T * H, 63, -4, 4));
  hash.update(bitsOf(c, c.moeExpertsAddRmsNorm(x, router, ex, route, res, c.fromHost([H], randomBf16(H, 64, 0.5, 1.5)), 1e-6)));
  return hash.digest('hex');
}

/** Set in the child run of this file whose kernels read a row's k choices 8 at a time (the test spawning it). */
const combineBatchRun = process.env.QUIRE_MOE_COMBINE_BATCH === '8';

describe('CUDA mixture of experts vs CPU', { skip: noCuda }, () => {
  let cpu: CpuBackend;
  let cuda: CudaBackend;
  before(() => {
    cpu = newCpu();
    cuda = newCuda();
  });
  after(() => {
    cpu?.dispose();
    cuda?.dispose();
  });

  // E 40: not a multiple of a warp; E 512, k 32: the most the kernel routes
  for (const [T, E, k, renormalize] of [[64, 128, 8, true], [33, 8, 2, false], [5, 40, 3, true], [3, 512, 32, false]] as const) {
    test(`routing of ${T} rows over ${E} experts, top ${k}${renormalize ? ', renormalized' : ''}: routeTokens' experts and weights`, () => {
      const logits = randomBf16(T * E, 100 + E, -4, 4);  // bf16 in [-4, 4): ties within a row are common
      logits.fill(0.5, 0, E);  // row 0: every expert tied
      for (let e = 0; e < E; e++) logits[E + e] = ((e * 37) % E - E / 2) * 0.9;  // row 1: a wide spread
      const rounded = bf16ToF32(f32ToBf16(logits));
      const route: MoeRoute = { topK: k, renormalize };
      beginPoisonedStep(cuda);
      const got = cuda.moe.routeToHost(cuda.fromHost([T, E], rounded), route);
      const want = routeTokens(rounded, T, E, route);
      assert.deepEqual(Array.from(got.experts), Array.from(want.experts));
      for (let i = 0; i < T * k; i++) {
        assert.ok(Math.abs(got.weights[i]! - want.weights[i]!) <= 2e-6, `weight ${i}: ${got.weights[i]} != ${want.weights[i]}`);
      }
    });
  }

  // the fused router: T up to MOE_FUSED_ROUTER_MAX_ROWS, E not a multiple of 16, H off the slices
  for (const [T, E, k, H, renormalize] of [[1, 128, 8, 2048, true], [5, 40, 3, 264, false], [64, 128, 8, 256, true],
    [3, 512, 32, 512, false], [MOE_FUSED_ROUTER_MAX_ROWS + 1, 128, 8, 256, true]] as const) {
    test(`the router of ${T} rows over ${E} experts, top ${k}, H ${H}: routeTokens' routing of its logits, grouped; the logits within bf16 of the GEMM's`, () => {
      assert.equal(planMoe(T, E, k, H, 64).router !== null, T <= MOE_FUSED_ROUTER_MAX_ROWS);
      const x = cuda.fromHost([T, H], randomBf16(T * H, 30 + T));
      const router = cuda.fromHost([E, H], randomBf16(E * H, 31 + E, -3 / Math.sqrt(H), 3 / Math.sqrt(H)));
      const route: MoeRoute = { topK: k, renormalize };
      try {
        for (const maxRows of [MOE_FUSED_ROUTER_MAX_ROWS, 0]) {
          cuda.moe.fusedRouterMaxRows = maxRows;
          beginPoisonedStep(cuda);
          const got = cuda.moe.routerToHost(x, router, route);
          const want = routeTokens(got.logits, T, E, route);
          assert.deepEqual(Array.from(got.experts), Array.from(want.experts), `experts (fused to ${maxRows} rows)`);
          for (let i = 0; i < T * k; i++) {
            assert.ok(Math.abs(got.weights[i]! - want.weights[i]!) <= 2e-6, `weight ${i}: ${got.weights[i]} != ${want.weights[i]}`);
          }
          assert.deepEqual(Array.from(got.offsets), offsetsOf(got.experts, E), `offsets (fused to ${maxRows} rows)`);
          assertTileLists(got, E, `fused to ${maxRows} rows`);
        }
        cuda.moe.fusedRouterMaxRows = MOE_FUSED_ROUTER_MAX_ROWS;
        beginPoisonedStep(cuda);
        const fused = cuda.moe.routerToHost(x, router, route).logits;
        beginPoisonedStep(cuda);
        assertBf16Close(fused, cuda.toHost(cuda.matmul(x, router, 'router')), 'logits vs the router GEMM');
      } finally {
        cuda.moe.fusedRouterMaxRows = 0;
      }
    });
  }

  test('where gate_up\'s and down\'s tiles differ the grouping writes a tile list for each: expertTileList\'s', () => {
    const [T, E, k, H, I] = [300, 8, 2, 2304, 64];  // 75 rows an expert: gate_up 128 outputs wide, down 2304
    const plan = planMoe(T, E, k, H, I);
    assert.notEqual(plan.gateUp.tokens, plan.down.tokens);
    const x = cuda.fromHost([T, H], randomBf16(T * H, 60));
    const router = cuda.fromHost([E, H], randomBf16(E * H, 61, -3 / Math.sqrt(H), 3 / Math.sqrt(H)));
    beginPoisonedStep(cuda);
    // gemm_rows' tiles (moe_wgmma.cu's are 128 tokens for both GEMMs)
    const got = withWgmmaMinRows(0, () => cuda.moe.routerToHost(x, router, { topK: k, renormalize: true }, I));
    assert.deepEqual(got.tiles.map((t) => t.tokens), [plan.gateUp.tokens, plan.down.tokens]);
    assertTileLists(got, E, 'two lists');
  });

  // [T, E, k, H, I, renormalize, the variant kind the plan takes]
  const cases = [
    [1, 128, 8, 256, 96, true, 'split'],  // decode, Qwen3-MoE's experts and top-k
    [2, 128, 8, 256, 96, false, 'split'],
    [7, 8, 2, 264, 200, true, 'split'],  // Mixtral's; H and I not multiples of 16
    [64, 128, 8, 256, 96, true, 'split'],
    [64, 8, 2, 256, 200, true, 'tiled'],  // 16 rows an expert: 64 x 32 tiles (MOE_TILED_FROM_ROWS)
    [300, 8, 2, 264, 200, true, 'tiled'],  // 75 rows an expert
    [2048, 128, 8, 128, 64, true, 'tiled'],  // 128 rows an expert
    [2048, 8, 2, 256, 136, false, 'tiled'],  // 512 rows an expert: 64 x 128 tiles, I not a multiple of their 32 outputs
  ] as const;
  /** fn with moe_wgmma.cu's threshold at minRows (0: never), the engine's (QUIRE_MOE_WGMMA_MIN_ROWS) restored after. */
  function withWgmmaMinRows<R>(minRows: number, fn: () => R): R {
    const was = cuda.moe.wgmmaMinRows;
    cuda.moe.wgmmaMinRows = minRows;
    try {
      return fn();
    } finally {
      cuda.moe.wgmmaMinRows = was;
    }
  }

  /** moeExperts on both backends from the same bf16 inputs (the picking router routes both alike). */
  function matchesCpu(T: number, E: number, k: number, H: number, I: number, renormalize: boolean): void {
    const v = expertValues(E, H, I, T + E);
    const [gc, gg] = uploadBoth(cpu, cuda, 'gate_up', [E * 2 * I, H], v.gateUp);
    const [dc, dg] = uploadBoth(cpu, cuda, 'down', [E * H, I], v.down);
    const [xc, xg] = uploadBoth(cpu, cuda, 'x', [T, H], randomBf16(T * H, 7 + T));
    const [lc, lg] = uploadBoth(cpu, cuda, 'router', [E, H], pickingRouter(E, H));
    const route: MoeRoute = { topK: k, renormalize };
    cpu.beginStep(oneToken);
    beginPoisonedStep(cuda);
    const got = cuda.toHost(cuda.moeExperts(xg, lg, { numExperts: E, intermediate: I, gateUp: gg, down: dg }, route));
    const want = cpu.toHost(cpu.moeExperts(xc, lc, { numExperts: E, intermediate: I, gateUp: gc, down: dc }, route));
    assertBf16Close(got, want, 'moeExperts');
  }

  for (const [T, E, k, H, I, renormalize, kind] of cases) {
    test(`moeExperts T ${T}, ${E} experts top ${k}, H ${H}, I ${I} (${kind}) matches the CPU`, () => {
      const plan = planMoe(T, E, k, H, I);
      assert.equal(plan.gateUp.variant?.kind, kind);
      assert.equal(plan.down.variant?.kind, kind);
      withWgmmaMinRows(0, () => matchesCpu(T, E, k, H, I, renormalize));  // the tiled builds on Hopper too
    });
  }

  // moe_wgmma.cu (QUIRE_MOE_WGMMA_MIN_ROWS, Hopper): k tails (H 264, I 200 and 136 off its 64-k stages), token tiles
  // part-filled, outputs off its 64 (gate_up) and 128 (down)
  for (const [T, E, k, H, I] of [[300, 8, 2, 264, 200], [2048, 128, 8, 256, 64], [40, 4, 2, 128, 136]] as const) {
    test(`moe_wgmma.cu's grouped GEMMs, T ${T}, ${E} experts top ${k}, H ${H}, I ${I}: the CPU's output (sm_90)`, (t) => {
      if (cuda.device.arch !== 90) {
        t.skip(`sm_${cuda.device.arch}: moe_wgmma.cu is built for sm_90a`);
        return;
      }
      const plan = planMoe(T, E, k, H, I, undefined, 0, false, E, 1);
      assert.deepEqual([plan.gateUp.kernel, plan.down.kernel], ['moe_gate_up_wgmma', 'moe_down_wgmma']);
      withWgmmaMinRows(1, () => matchesCpu(T, E, k, H, I, true));
    });
  }

  // The engine's own threshold (QUIRE_MOE_WGMMA_MIN_ROWS, 32 by default): prompt chunks of 128 rows an expert on
  // moe_wgmma.cu, decode batches of 16 on gemm_rows' builds.
  test('on Hopper the engine runs moe_wgmma.cu from QUIRE_MOE_WGMMA_MIN_ROWS rows an expert, gemm_rows below', (t) => {
    if (cuda.device.arch !== 90) {
      t.skip(`sm_${cuda.device.arch}: moe_wgmma.cu is built for sm_90a`);
      return;
    }
    const min = readKnob('QUIRE_MOE_WGMMA_MIN_ROWS');
    assert.equal(cuda.moe.wgmmaMinRows, min);
    const [E, k, H, I] = [128, 8, 256, 64];
    const ex = cudaExperts(cuda, E, H, I, 70);
    const router = cuda.fromHost([E, H], randomBf16(E * H, 71, -3 / Math.sqrt(H), 3 / Math.sqrt(H)));
    const route: MoeRoute = { topK: k, renormalize: true };
    for (const T of [256, 2048]) {
      const x = cuda.fromHost([T, H], randomBf16(T * H, 72 + T));
      const run = (minRows: number) => withWgmmaMinRows(minRows, () => {
        beginPoisonedStep(cuda);
        return bitsOf(cuda, cuda.moeExperts(x, router, ex, route));
      });
      const [engine, wgmma, gemmRows] = [run(min), run(1), run(0)];
      const onWgmma = min > 0 && (T * k) / E >= min;
      assertSameBits(engine, onWgmma ? wgmma : gemmRows, `T ${T}: the ${onWgmma ? 'wgmma' : 'gemm_rows'} bits`);
    }
  });

  test('bench-moe times the layer it digests: its digest is the output\'s of moeExperts on its inputs, its TFLOP/s finite', () => {
    const shape = { tokens: 200, experts: 16, topK: 4, hidden: 128, width: 64 };
    const [r] = runMoeBench(shape, 2, cuda) as [MoeBenchResult];
    const inp = moeBenchInputs(shape, cuda);
    beginPoisonedStep(cuda);
    assert.equal(r.digest, outputDigest(cuda, cuda.moeExperts(inp.x, inp.router, inp.experts, inp.route) as CudaTensor));
    const other = moeBenchInputs({ ...shape, topK: 2 }, cuda);
    beginPoisonedStep(cuda);
    assert.notEqual(r.digest, outputDigest(cuda, cuda.moeExperts(other.x, other.router, other.experts, other.route) as CudaTensor));
    assert.ok(Number.isFinite(r.tflops) && r.tflops > 0 && r.ms > 0, `${r.ms} ms, ${r.tflops} TFLOP/s`);
  });

  test('bench-moe --variants: every gemm_rows path gives the same digest, and CudaMoe is left as it was', () => {
    const shape = { tokens: 200, experts: 16, topK: 4, hidden: 128, width: 64 };
    const before = { variant: cuda.moe.variant, wgmmaMinRows: cuda.moe.wgmmaMinRows };
    const runs = runMoeBench(shape, 1, cuda, moeVariantNames().filter((p) => p !== 'wgmma' || cuda.device.arch === 90));
    assert.deepEqual(runs.map((r) => r.path), moeVariantNames().slice(0, runs.length));
    const rows = runs.filter((r) => r.path !== 'default' && r.path !== 'wgmma');
    assert.equal(rows.length, GEMM_ROWS_VARIANTS.length);
    for (const r of rows) assert.equal(r.digest, rows[0]!.digest, `${r.path}: gemm_rows' bits follow K alone`);
    assert.deepEqual({ variant: cuda.moe.variant, wgmmaMinRows: cuda.moe.wgmmaMinRows }, before);
  });

  test('a row has the same bits alone as in a batch of 300 rows on its experts, on every variant', () => {
    const [T, E, k, H, I] = [300, 128, 8, 256, 96];
    const ex = cudaExperts(cuda, E, H, I, 11);
    const xs = randomBf16(T * H, 12);
    const row0 = randomBf16(E, 13, -1, 1);
    for (let t = 0; t < T; t++) xs.set(row0, t * H);  // every row routes to row 0's experts, with its weights
    const x = cuda.fromHost([T, H], xs);
    const router = cuda.fromHost([E, H], pickingRouter(E, H));
    const route: MoeRoute = { topK: k, renormalize: true };
    const run = (rows: CudaTensor) => {
      beginPoisonedStep(cuda);
      return bitsOf(cuda, cuda.moeExperts(rows, router, ex, route));
    };
    try {
      const batch = run(x);
      for (const r of [0, 1, 150, 299]) {
        assertSameBits(run(rowsOf(x, r, 1)), batch.slice(r * H, (r + 1) * H), `row ${r} alone`);
        const s = Math.min(r, T - 7);  // and as one of 7 rows
        assertSameBits(run(rowsOf(x, s, 7)).slice((r - s) * H, (r - s + 1) * H), batch.slice(r * H, (r + 1) * H), `row ${r} of 7`);
      }
      for (const variant of GEMM_ROWS_VARIANTS) {
        cuda.moe.variant = variant;
        assertSameBits(run(x), batch, `the batch on ${variant.kind} m${variant.mt} n${variant.nt}`);
      }
    } finally {
      cuda.moe.variant = undefined;
    }
  });

  // The combine reads a row's k choices QUIRE_MOE_COMBINE_BATCH at a time (a kernel #define): this file's CPU and
  // bit-consistency checks again in a process built with 8, and the same output bits as this one's on fixed inputs.
  test('the combine reading 8 choices at a time (QUIRE_MOE_COMBINE_BATCH=8) gives these bits and passes these checks',
    { skip: combineBatchRun ? 'this is that run' : false }, () => {
      const out = rerunWith(import.meta.url, { QUIRE_MOE_COMBINE_BATCH: '8' },
        'matches the CPU|moeExpertsAddRmsNorm|same bits alone|combine bits');
      assert.equal(/combine bits md5 ([0-9a-f]{32})/.exec(out)?.[1], combineCaseMd5(cuda));
    });

  test('combine bits (the child run: its md5 for the test above)', { skip: combineBatchRun ? false : 'only in the child run' }, (t) => {
    const md5 = combineCaseMd5(cuda);
    assert.match(md5, /^[0-9a-f]{32}$/);
    t.diagnostic(`combine bits md5 ${md5}`);
  });

  for (const [T, H] of [[1, 256], [7, 264], [300, 256]] as const) {
    test(`moeExpertsAddRmsNorm, T ${T}, H ${H}: the residual and the normed output have moeExperts then addRmsNorm's bits`, () => {
      const [E, k, I] = [128, 8, 96];
      const ex = cudaExperts(cuda, E, H, I, 40);
      const x = cuda.fromHost([T, H], randomBf16(T * H, 41));
      const router = cuda.fromHost([E, H], randomBf16(E * H, 42, -3 / Math.sqrt(H), 3 / Math.sqrt(H)));
      const resValues = randomBf16(T * H, 43, -4, 4);
      const normW = cuda.fromHost([H], randomBf16(H, 44, 0.5, 1.5));
      const route: MoeRoute = { topK: k, renormalize: true };
      beginPoisonedStep(cuda);
      const res1 = cuda.fromHost([T, H], resValues);
      const want = bitsOf(cuda, cuda.addRmsNorm(cuda.moeExperts(x, router, ex, route), res1, normW, 1e-6));
      beginPoisonedStep(cuda);
      const res2 = cuda.fromHost([T, H], resValues);
      const got = bitsOf(cuda, cuda.moeExpertsAddRmsNorm(x, router, ex, route, res2, normW, 1e-6));
      assertSameBits(got, want, 'the normed output');
      assertSameBits(bitsOf(cuda, res2), bitsOf(cuda, res1), 'the residual');
    });
  }
});

describe('CUDA mixture of experts in a decode step', { skip: noCuda }, () => {
  const backends: CudaBackend[] = [];
  after(() => backends.forEach((b) => b.dispose()));
  const [V, E, k, H, I] = [64, 128, 8, 256, 96];

  /** A decode step's MoE on `c`: embedding -> moeExperts, one row a sequence. */
  function decodeStep(c: CudaBackend): (ids: number[]) => { batch: ReturnType<typeof batchOf>; record: () => Float32Array } {
    const table = c.fromHost([V, H], randomBf16(V * H, 21));
    const router = c.fromHost([E, H], randomBf16(E * H, 22, -0.5, 0.5));
    const ex = cudaExperts(c, E, H, I, 23);
    return (ids) => {
      const batch = batchOf(ids.map((id, s) => ({ ids: [id], start: 0, pages: [s] })), 16);
      return { batch, record: () => {
        const step = c.beginStep(batch);
        const x = c.embedding(table, step);
        return c.toHost(c.moeExperts(x, router, ex, { topK: k, renormalize: true }));
      } };
    };
  }

  for (const fusedRows of [0, MOE_FUSED_ROUTER_MAX_ROWS]) {
    test(`a step captured as a graph replays to the eager result when its tokens route elsewhere (fused router to ${fusedRows} rows)`, () => {
      const c = newCuda();
      backends.push(c);
      c.moe.fusedRouterMaxRows = fusedRows;
      const step = decodeStep(c);
      for (let i = 0; i < 5; i++) {
        const { batch, record } = step([(i * 7 + 1) % V, (i * 13 + 2) % V, (i * 5 + 3) % V, (i * 11 + 4) % V]);
        const eager = record();
        assert.deepEqual(c.graph(4, batch, record), eager, `step ${i}`);
      }
      assert.equal(c.numGraphCaptures, 1);
      assert.equal(c.numGraphReplays, 4);
    });
  }

  test('a profiled decode step names the router, routing, gate_up, down and combine buckets (the fused router: no router GEMM)', () => {
    for (const fusedRows of [0, MOE_FUSED_ROUTER_MAX_ROWS]) {
      const c = newCuda({ profile: true, log: () => {} });
      backends.push(c);
      c.moe.fusedRouterMaxRows = fusedRows;
      decodeStep(c)([1, 2, 3]).record();
      const buckets = c.lastProfile!.rows.map((r) => r.bucket);
      for (const b of ['moe route', 'gemm expert gate_up', 'gemm expert down', 'moe combine']) {
        assert.ok(buckets.includes(b), `${b} in ${buckets.join(', ')}`);
      }
      assert.equal(buckets.includes('gemm router'), fusedRows === 0, `the router GEMM in ${buckets.join(', ')}`);
    }
  });
});

describe('CUDA mixture of experts in the batch-invariant mode', { skip: noCuda }, () => {
  let cuda: CudaBackend;
  before(() => {
    cuda = newCuda({ batchInvariant: true });
    cuda.moe.fusedRouterMaxRows = MOE_FUSED_ROUTER_MAX_ROWS;
  });
  after(() => cuda?.dispose());

  test('on Hopper too a prompt chunk of 128 rows an expert keeps gemm_rows\' bits (never moe_wgmma.cu\'s): a row\'s '
    + 'output is its own alone', () => {
    assert.equal(cuda.moe.wgmmaMinRows, 0);
    const [T, E, k, H, I] = [2048, 128, 8, 256, 64];
    const ex = cudaExperts(cuda, E, H, I, 80);
    const x = cuda.fromHost([T, H], randomBf16(T * H, 81));
    const router = cuda.fromHost([E, H], randomBf16(E * H, 82, -3 / Math.sqrt(H), 3 / Math.sqrt(H)));
    const route: MoeRoute = { topK: k, renormalize: true };
    beginPoisonedStep(cuda);
    const batch = bitsOf(cuda, cuda.moeExperts(x, router, ex, route));
    for (const r of [0, 1000, 2047]) {
      beginPoisonedStep(cuda);
      assertSameBits(bitsOf(cuda, cuda.moeExperts(rowsOf(x, r, 1), router, ex, route)), batch.slice(r * H, (r + 1) * H),
        `row ${r} alone`);
    }
  });

  test('a row\'s logits, routing and output have the same bits alone (the fused router) as in a batch of 300 (gemm_rows, moe_route, moe_group)', () => {
    const [T, E, k, H, I] = [300, 128, 8, 256, 96];
    const ex = cudaExperts(cuda, E, H, I, 50);
    const x = cuda.fromHost([T, H], randomBf16(T * H, 51));
    const router = cuda.fromHost([E, H], randomBf16(E * H, 52, -3 / Math.sqrt(H), 3 / Math.sqrt(H)));
    const route: MoeRoute = { topK: k, renormalize: true };
    assert.equal(planMoe(T, E, k, H, I).router, null);
    assert.notEqual(planMoe(1, E, k, H, I).router, null);
    beginPoisonedStep(cuda);
    const batch = cuda.moe.routerToHost(x, router, route);
    beginPoisonedStep(cuda);
    const out = bitsOf(cuda, cuda.moeExperts(x, router, ex, route));
    for (const r of [0, 77, 299]) {
      beginPoisonedStep(cuda);
      const alone = cuda.moe.routerToHost(rowsOf(x, r, 1), router, route);
      assertSameBits(new Uint32Array(alone.logits.buffer), new Uint32Array(batch.logits.slice(r * E, (r + 1) * E).buffer),
        `row ${r}'s logits`);
      assert.deepEqual(Array.from(alone.experts), Array.from(batch.experts.slice(r * k, (r + 1) * k)), `row ${r}'s experts`);
      assert.deepEqual(Array.from(alone.weights), Array.from(batch.weights.slice(r * k, (r + 1) * k)), `row ${r}'s weights`);
      beginPoisonedStep(cuda);
      assertSameBits(bitsOf(cuda, cuda.moeExperts(rowsOf(x, r, 1), router, ex, route)), out.slice(r * H, (r + 1) * H),
        `row ${r}'s output`);
    }
  });
});
