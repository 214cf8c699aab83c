// The device's mixture of experts (Backend.moeExperts: kernels/moe.cu, moe.ts): its routing is routeTokens' (the same
// experts, weights within 2e-6); its outputs match the CPU backend's on the same bf16 inputs, on decode steps (the split
// variants) and prefill chunks (the tiled ones), at Qwen3-MoE's and Mixtral's expert counts and top-k with hidden
// sizes and widths off the tiles; a row's bits are the same alone as in a batch whose every row chose its experts, on
// every variant; a decode step captured as a graph replays to the eager result when its tokens route elsewhere; a
// profile names the MoE buckets; block-FP8 experts are refused by name. CUDA outputs start as NaN.

import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import type { MoeExperts, MoeRoute } from '../../src/backend/backend.js';
import type { CpuBackend } from '../../src/backend/cpu/cpu-backend.js';
import { CudaTensor, type CudaBackend } from '../../src/backend/cuda/cuda-backend.js';
import { GEMM_ROWS_VARIANTS } from '../../src/backend/cuda/gemm-rows.js';
import { planMoe } from '../../src/backend/cuda/moe-plan.js';
import { routeTokens } from '../../src/backend/moe-route.js';
import { bf16ToF32, f32ToBf16 } from '../../src/loader/dtype.js';
import { batchOf } from '../backend/helpers.js';
import { assertBf16Close, assertSameBits, beginPoisonedStep, bitsOf, newCpu, newCuda, noCuda, randomBf16, rowsOf,
  uploadBoth } from './cuda-helpers.js';

/** Random experts of E x width I on hidden H, scaled so that every product stays near 1. */
function expertValues(E: number, H: number, I: number, seed: number): { gateUp: Float32Array; down: Float32Array } {
  return { gateUp: randomBf16(E * 2 * I * H, seed, -2 / Math.sqrt(H), 2 / Math.sqrt(H)),
    down: randomBf16(E * H * I, seed + 1, -2 / Math.sqrt(I), 2 / Math.sqrt(I)) };
}

function cudaExperts(c: CudaBackend, E: number, H: number, I: number, seed: number): MoeExperts {
  const v = expertValues(E, H, I, seed);
  return { numExperts: E, intermediate: I, gateUp: c.fromHost([E * 2 * I, H], v.gateUp), down: c.fromHost([E * H, I], v.down) };
}

const oneToken = batchOf([{ ids: [1], start: 0, pages: [0] }], 16);

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

  // [T, E, k, H, I, renormalize, the variant kind the plan takes]
  const cases = [
    [1, 128, 8, 256, 96, true, 'split'],  // decode, Qwen3-MoE's experts and top-k
    [2, 128, 8, 256, 96, false, 'split'],
    [7, 8, 2, 264, 200, true, 'split'],  // Mixtral's; H and I not multiples of 16
    [64, 128, 8, 256, 96, true, 'split'],
    [64, 8, 2, 256, 200, true, 'split'],
    [300, 8, 2, 264, 200, true, 'tiled'],  // 75 rows an expert
    [2048, 128, 8, 128, 64, true, 'tiled'],  // 128 rows an expert
    [2048, 8, 2, 256, 136, false, 'tiled'],  // 512 rows an expert: 64 x 128 tiles, I not a multiple of their 32 outputs
  ] as const;
  for (const [T, E, k, H, I, renormalize, kind] of cases) {
    test(`moeExperts T ${T}, ${E} experts top ${k}, H ${H}, I ${I} (${kind}) matches the CPU`, () => {
      const plan = planMoe(T, E, k, H, I);
      assert.equal(plan.gateUp.variant.kind, kind);
      assert.equal(plan.down.variant.kind, kind);
      const v = expertValues(E, H, I, T + E);
      const [gc, gg] = uploadBoth(cpu, cuda, 'gate_up', [E * 2 * I, H], v.gateUp);
      const [dc, dg] = uploadBoth(cpu, cuda, 'down', [E * H, I], v.down);
      const [xc, xg] = uploadBoth(cpu, cuda, 'x', [T, H], randomBf16(T * H, 7 + T));
      const [lc, lg] = uploadBoth(cpu, cuda, 'logits', [T, E], randomBf16(T * E, 8 + T, -4, 4));
      const route: MoeRoute = { topK: k, renormalize };
      cpu.beginStep(oneToken);
      beginPoisonedStep(cuda);
      const got = cuda.toHost(cuda.moeExperts(xg, lg, { numExperts: E, intermediate: I, gateUp: gg, down: dg }, route));
      const want = cpu.toHost(cpu.moeExperts(xc, lc, { numExperts: E, intermediate: I, gateUp: gc, down: dc }, route));
      assertBf16Close(got, want, 'moeExperts');
    });
  }

  test('a row has the same bits alone as in a batch of 300 rows on its experts, on every variant', () => {
    const [T, E, k, H, I] = [300, 128, 8, 256, 96];
    const ex = cudaExperts(cuda, E, H, I, 11);
    const x = cuda.fromHost([T, H], randomBf16(T * H, 12));
    const row0 = randomBf16(E, 13, -4, 4);
    const logits = new Float32Array(T * E);
    for (let t = 0; t < T; t++) logits.set(row0, t * E);  // every row routes to row 0's experts, with its weights
    const l = cuda.fromHost([T, E], logits);
    const route: MoeRoute = { topK: k, renormalize: true };
    const run = (xs: CudaTensor, ls: CudaTensor) => {
      beginPoisonedStep(cuda);
      return bitsOf(cuda, cuda.moeExperts(xs, ls, ex, route));
    };
    try {
      const batch = run(x, l);
      for (const r of [0, 1, 150, 299]) {
        assertSameBits(run(rowsOf(x, r, 1), rowsOf(l, r, 1)), batch.slice(r * H, (r + 1) * H), `row ${r} alone`);
        const s = Math.min(r, T - 7);  // and as one of 7 rows
        assertSameBits(run(rowsOf(x, s, 7), rowsOf(l, s, 7)).slice((r - s) * H, (r - s + 1) * H),
          batch.slice(r * H, (r + 1) * H), `row ${r} of 7`);
      }
      for (const variant of GEMM_ROWS_VARIANTS) {
        cuda.moe.variant = variant;
        assertSameBits(run(x, l), batch, `the batch on ${variant.kind} m${variant.mt} n${variant.nt}`);
      }
    } finally {
      cuda.moe.variant = undefined;
    }
  });

  test('block-FP8 experts are refused by name', () => {
    const [E, H, I] = [8, 128, 128];
    const ex = cudaExperts(cuda, E, H, I, 14);
    const g = ex.gateUp as CudaTensor;
    const fp8 = new CudaTensor(g.shape, g.ptr, 'f8_e4m3', g.ptr);
    beginPoisonedStep(cuda);
    assert.throws(() => cuda.moeExperts(cuda.fromHost([1, H], randomBf16(H, 15)), cuda.fromHost([1, E], randomBf16(E, 16)),
      { ...ex, gateUp: fp8 }, { topK: 2, renormalize: true }), /block-FP8 experts are not supported on the cuda backend/);
  });
});

describe('CUDA mixture of experts in a decode step', { skip: noCuda }, () => {
  const backends: CudaBackend[] = [];
  after(() => backends.forEach((b) => b.dispose()));
  const [V, E, k, H, I] = [64, 128, 8, 256, 96];

  /** A decode step's MoE on `c`: embedding -> router GEMM -> moeExperts, one row a sequence. */
  function decodeStep(c: CudaBackend): (ids: number[]) => { batch: ReturnType<typeof batchOf>; record: () => Float32Array } {
    const table = c.fromHost([V, H], randomBf16(V * H, 21));
    const router = c.fromHost([E, H], randomBf16(E * H, 22, -0.5, 0.5));
    const ex = cudaExperts(c, E, H, I, 23);
    return (ids) => {
      const batch = batchOf(ids.map((id, s) => ({ ids: [id], start: 0, pages: [s] })), 16);
      return { batch, record: () => {
        const step = c.beginStep(batch);
        const x = c.embedding(table, step);
        return c.toHost(c.moeExperts(x, c.matmul(x, router, 'router'), ex, { topK: k, renormalize: true }));
      } };
    };
  }

  test('a step captured as a graph replays to the eager result when its tokens route elsewhere', () => {
    const c = newCuda();
    backends.push(c);
    const step = decodeStep(c);
    for (let i = 0; i < 5; i++) {
      const { batch, record } = step([(i * 7 + 1) % V, (i * 13 + 2) % V, (i * 5 + 3) % V, (i * 11 + 4) % V]);
      const eager = record();
      assert.deepEqual(c.graph(4, batch, record), eager, `step ${i}`);
    }
    assert.equal(c.numGraphCaptures, 1);
    assert.equal(c.numGraphReplays, 4);
  });

  test('a profiled step names the router, routing, gate_up, down and combine buckets', () => {
    const c = newCuda({ profile: true, log: () => {} });
    backends.push(c);
    decodeStep(c)([1, 2, 3]).record();
    const buckets = c.lastProfile!.rows.map((r) => r.bucket);
    for (const b of ['gemm router', 'moe route', 'gemm expert gate_up', 'gemm expert down', 'moe combine']) {
      assert.ok(buckets.includes(b), `${b} in ${buckets.join(', ')}`);
    }
  });
});
