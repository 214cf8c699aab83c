// Block-FP8 experts on the device (moeExperts' _fp8 builds, kernels/moe.cu; inputs quantized by kernels/quant_fp8.cu):
// W8A8 as the CPU backend computes them (its fp8BlockMatmul on the same e4m3 weights and scales, x and gate_up's f32
// output quantized per row and 128 columns), within bf16 tolerance, on decode steps (the split builds) and prefill
// chunks (both tiled ones), with Qwen3-MoE's and Mixtral's expert counts and top-k; a row's bits are the same alone,
// as one of 7 and in a batch of 300 on its experts, and the same on every variant (the FP8 contract depends on K
// alone); a decode step captured as a graph replays to the eager result when its tokens route elsewhere, and its
// profile names the quantize buckets; experts of two precisions are refused by name; bench-moe --fp8 times such a
// layer on each gemm_rows path (one digest). CUDA outputs start as NaN.

import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import type { Backend, Fp8BlockPart, MoeExperts, MoeRoute } from '../../src/backend/backend.js';
import type { CpuBackend } from '../../src/backend/cpu/cpu-backend.js';
import type { CudaBackend, CudaTensor } from '../../src/backend/cuda/cuda-backend.js';
import { GEMM_ROWS_VARIANTS } from '../../src/backend/cuda/gemm-rows.js';
import { moeVariantNames, runMoeBench } from '../../src/lab/bench-moe.js';
import { planMoe } from '../../src/backend/cuda/moe-plan.js';
import { quantizeWeightBlocks } from '../../src/backend/fp8-linear.js';
import { e4m3Bits } from '../../src/loader/fp8.js';
import { batchOf } from '../backend/helpers.js';
import { assertBf16Close, assertSameBits, beginPoisonedStep, bitsOf, newCpu, newCuda, noCuda, randomBf16, rowsOf,
  uploadBoth } from './cuda-helpers.js';

/** A stacked weight [n, K] as a block-FP8 checkpoint stores it (one part: its rows are whole 128-row blocks). */
function fp8Part(name: string, w: Float32Array, n: number, K: number): Fp8BlockPart {
  const { q, scaleInv } = quantizeWeightBlocks(w, n, K);
  return {
    weight: { name: `${name}.weight`, dtype: 'f8_e4m3', shape: [n, K], data: Uint8Array.from(q, e4m3Bits) },
    scaleInv: { name: `${name}.weight_scale_inv`, dtype: 'f32', shape: [n / 128, K / 128], data: new Uint8Array(scaleInv.buffer) },
  };
}

/** Random experts of E x width I on hidden H in block FP8, the same bytes on each backend. */
function fp8Experts(backends: Backend[], E: number, H: number, I: number, seed: number): MoeExperts[] {
  const gateUp = fp8Part('gate_up', randomBf16(E * 2 * I * H, seed, -2 / Math.sqrt(H), 2 / Math.sqrt(H)), E * 2 * I, H);
  const down = fp8Part('down', randomBf16(E * H * I, seed + 1, -2 / Math.sqrt(I), 2 / Math.sqrt(I)), E * H, I);
  return backends.map((b) => ({ numExperts: E, intermediate: I, gateUp: b.uploadFp8Block!('gate_up', [gateUp]),
    down: b.uploadFp8Block!('down', [down]) }));
}

/** A router [E, H] whose logit e is 4 x[e] (E <= H): exact in any order, so both backends route alike. */
function pickingRouter(E: number, H: number): Float32Array {
  const r = new Float32Array(E * H);
  for (let e = 0; e < E; e++) r[e * H + e] = 4;
  return r;
}

const arch = noCuda ? 0 : (() => {
  const c = newCuda();
  try {
    return c.device.arch;
  } finally {
    c.dispose();
  }
})();
const skip = noCuda || (arch < 90 && 'block-FP8 weights need sm_90');

describe('CUDA block-FP8 experts vs CPU', { skip }, () => {
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

  // [T, E, k, H, I, renormalize, the gate_up kernel the plan takes]
  const cases = [
    [1, 128, 8, 256, 128, true, 'moe_gate_up_fp8_split_m2_n1'],  // decode, Qwen3-MoE's experts and top-k
    [5, 40, 3, 384, 256, false, 'moe_gate_up_fp8_split_m2_n1'],  // E not a multiple of a warp, odd scale groups
    [64, 8, 2, 256, 384, true, 'moe_gate_up_fp8_split_m2_n2'],  // Mixtral's: 16 rows an expert
    [64, 128, 8, 256, 128, true, 'moe_gate_up_fp8_split_m2_n1'],
    [300, 128, 8, 256, 128, true, 'moe_gate_up_fp8_split_m2_n4'],  // 19 rows an expert
    [300, 8, 2, 384, 256, true, 'moe_gate_up_fp8_tiled_w2x2_m2_n2'],  // 75 rows an expert
    [2048, 8, 2, 256, 128, false, 'moe_gate_up_fp8_tiled_w1x4_m4_n4'],  // 512 rows an expert
  ] as const;
  for (const [T, E, k, H, I, renormalize, kernel] of cases) {
    test(`T ${T}, ${E} experts top ${k}, H ${H}, I ${I} (${kernel}): the CPU's W8A8 within bf16 tolerance`, () => {
      assert.equal(planMoe(T, E, k, H, I, undefined, 0, true).gateUp.kernel, kernel);
      const [ec, eg] = fp8Experts([cpu, cuda], E, H, I, T + E);
      const xs = randomBf16(T * H, 7 + T, -3, 3);
      xs.fill(0, H - 128, H);  // row 0's last group all zeros: eps's scale
      const [xc, xg] = uploadBoth(cpu, cuda, 'x', [T, H], xs);
      const [rc, rg] = uploadBoth(cpu, cuda, 'router', [E, H], pickingRouter(E, H));
      const route: MoeRoute = { topK: k, renormalize };
      cpu.beginStep(batchOf([{ ids: [1], start: 0, pages: [0] }], 16));
      beginPoisonedStep(cuda);
      const got = cuda.toHost(cuda.moeExperts(xg, rg, eg!, route));
      assertBf16Close(got, cpu.toHost(cpu.moeExperts(xc, rc, ec!, route)), 'moeExperts');
    });
  }

  test('a row has the same bits alone, as one of 7 and in a batch of 300 rows on its experts, on every variant', () => {
    const [T, E, k, H, I] = [300, 128, 8, 256, 128];
    const [ex] = fp8Experts([cuda], E, H, I, 11);
    const xs = randomBf16(T * H, 12, -3, 3);
    const row0 = randomBf16(E, 13, -1, 1);
    for (let t = 0; t < T; t++) xs.set(row0, t * H);  // every row routes to row 0's experts, with its weights
    const x = cuda.fromHost([T, H], xs);
    const router = cuda.fromHost([E, H], pickingRouter(E, H));
    const route: MoeRoute = { topK: k, renormalize: true };
    const run = (rows: CudaTensor) => {
      beginPoisonedStep(cuda);
      return bitsOf(cuda, cuda.moeExperts(rows, router, ex!, route));
    };
    try {
      const batch = run(x);
      for (const r of [0, 1, 150, 299]) {
        assertSameBits(run(rowsOf(x, r, 1)), batch.slice(r * H, (r + 1) * H), `row ${r} alone`);
        const s = Math.min(r, T - 7);
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

  test('bench-moe --fp8 times block-FP8 experts: every gemm_rows path one digest, not the bf16 layer\'s', () => {
    const shape = { tokens: 200, experts: 16, topK: 4, hidden: 128, width: 128, fp8: true };
    const paths = moeVariantNames().filter((p) => p !== 'wgmma');
    const runs = runMoeBench(shape, 1, cuda, paths);
    for (const r of runs) assert.equal(r.digest, runs[0]!.digest, `${r.path}: the FP8 builds' bits follow K alone`);
    assert.ok(runs.every((r) => r.ms > 0 && r.fp8 === true));
    const [bf16] = runMoeBench({ ...shape, fp8: false }, 1, cuda);
    assert.notEqual(bf16!.digest, runs[0]!.digest, 'the FP8 experts ran');
    assert.throws(() => runMoeBench(shape, 1, cuda, ['wgmma']), /wgmma takes bf16 experts, not --fp8/);
  });

  test('experts of two precisions are refused by name', () => {
    const [E, H, I] = [8, 128, 128];
    const [ex] = fp8Experts([cuda], E, H, I, 14);
    const bf16Down = cuda.fromHost([E * H, I], randomBf16(E * H * I, 15));
    beginPoisonedStep(cuda);
    assert.throws(() => cuda.moeExperts(cuda.fromHost([1, H], randomBf16(H, 16)), cuda.fromHost([E, H], randomBf16(E * H, 17)),
      { ...ex!, down: bf16Down }, { topK: 2, renormalize: true }), /down \[1024, 128\] bf16 \(both block FP8\) for 8 of 8 experts of width 128/);
  });
});

describe('CUDA block-FP8 experts in a decode step', { skip }, () => {
  const backends: CudaBackend[] = [];
  after(() => backends.forEach((b) => b.dispose()));
  const [V, E, k, H, I] = [64, 128, 8, 256, 128];

  /** A decode step's MoE on `c`: embedding -> moeExperts, one row a sequence. */
  function decodeStep(c: CudaBackend): (ids: number[]) => { batch: ReturnType<typeof batchOf>; record: () => Float32Array } {
    const table = c.fromHost([V, H], randomBf16(V * H, 21));
    const router = c.fromHost([E, H], randomBf16(E * H, 22, -0.5, 0.5));
    const [ex] = fp8Experts([c], E, H, I, 23);
    return (ids) => {
      const batch = batchOf(ids.map((id, s) => ({ ids: [id], start: 0, pages: [s] })), 16);
      return { batch, record: () => {
        const step = c.beginStep(batch);
        const x = c.embedding(table, step);
        return c.toHost(c.moeExperts(x, router, ex!, { topK: k, renormalize: true }));
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

  test('a profiled decode step names the quantize buckets beside the expert GEMMs', () => {
    const c = newCuda({ profile: true, log: () => {} });
    backends.push(c);
    decodeStep(c)([1, 2, 3]).record();
    const buckets = c.lastProfile!.rows.map((r) => r.bucket);
    for (const b of ['moe route', 'moe quantize', 'gemm expert gate_up', 'gemm expert down', 'moe combine']) {
      assert.ok(buckets.includes(b), `${b} in ${buckets.join(', ')}`);
    }
  });
});
