// The chain GEMM's bf16 _s2 builds (kernels/gemm_chain.cu): each 16-row tile's k split between two warps, each half
// a chain from zero, the halves added in order (gemm-chain.ts takes them from K 1,024 on weights of few tiles a SM).
// Their bits are not cuBLASLt's, so: with integer products (every partial sum exact in fp32, so every order agrees)
// they equal cuBLASLt's at 256 rows, bias and silu_mul included, which checks every slice, row and token; on random
// data they stay within a bf16 rounding of it, most outputs equal. A split grid of more than one wave of blocks is run
// split on 8-stage rings (chainShortRing, QUIRE_CHAIN_SHORT_RING's default; gemm_chain_s2: cuBLASLt's bits on integer
// products, not on random data), or without it unsplit (cuBLASLt's bits). Outputs start as NaN (the workspace is
// poisoned).

import { after, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import type { CudaTensor } from '../../src/backend/cuda/cuda-backend.js';
import { planChainGemm } from '../../src/backend/cuda/gemm-chain.js';
import { assertSameBits, beginPoisonedStep as begin, bitsOf, newCuda, noCuda, randomBf16, rowsOf } from './cuda-helpers.js';

const ROWS = 256;
const integers = (n: number, a: number, b: number) =>
  Float32Array.from({ length: n }, (_, i) => ((i * a) % b) - (b >> 1));

describe('CUDA chain GEMM, k split between two warps (bf16)', { skip: noCuda }, () => {
  const cuda = noCuda ? null : newCuda();
  after(() => cuda?.dispose());
  const steps = [[0, 1], [77, 1], [3, 5], [100, 8], [248, 8]] as const;

  // qwen3-0.6b's qkv (rings of 8 stages a warp) and gate_up as pairs; qwen3-8b's down (16 stages, _p8); Qwen2's bias
  for (const [N, K, silu, bias, kernel] of [[4096, 1024, false, false, 'gemm_chain_s2'],
    [6144, 1024, true, false, 'gemm_chain_silu_pair_s2'], [4096, 12288, false, false, 'gemm_chain_p8_s2'],
    [4096, 1024, false, true, 'gemm_chain_s2']] as const) {
    const what = `${kernel}${bias ? ' with a bias' : ''}, N ${N} K ${K}`;
    /** The 256-row output (cuBLASLt, then silu_mul) and each small step's rows on the chain kernel. */
    const run = (x: CudaTensor, w: CudaTensor, b: CudaTensor | undefined) => {
      const c = cuda!;
      begin(c);
      const before = c.numChainGemms;
      const whole = bitsOf(c, silu ? c.siluMul(c.matmul(x, w, 'test')) : c.matmul(x, w, 'test', b));
      assert.equal(c.numChainGemms, before, '256 rows go to cuBLASLt');
      const width = silu ? N / 2 : N;
      const parts = steps.map(([start, rows]) => {
        begin(c);
        const xs = rowsOf(x, start, rows);
        return { start, rows, bits: bitsOf(c, silu ? c.matmulSiluMul(xs, w) : c.matmul(xs, w, 'test', b)) };
      });
      assert.equal(c.numChainGemms, before + steps.length, 'every small step ran the chain kernel');
      return parts.map((p) => ({ ...p, expected: whole.slice(p.start * width, (p.start + p.rows) * width) }));
    };

    test(`${what}: integer products give cuBLASLt's bits at 256 rows`, () => {
      const c = cuda!;
      for (const T of [1, 8]) {
        assert.equal(planChainGemm(T, N, K, c.device.numSMs, silu ? 'pairs' : 'none')?.kernel, kernel);
      }
      // |sums| <= K 2 4 (+ 8): exact in fp32
      const x = c.fromHost([ROWS, K], integers(ROWS * K, 7, 5));
      const w = c.fromHost([N, K], integers(N * K, 13, 9));
      const b = bias ? c.fromHost([N], integers(N, 3, 17)) : undefined;
      for (const p of run(x, w, b)) assertSameBits(p.bits, p.expected, `${p.rows} rows from ${p.start}`);
    });

    test(`${what}: random data within a bf16 rounding of cuBLASLt, most outputs equal`, () => {
      const c = cuda!;
      const x = c.fromHost([ROWS, K], randomBf16(ROWS * K, 3 + K, -2, 2));
      const w = c.fromHost([N, K], randomBf16(N * K, 4 + N, -0.05, 0.05));
      const b = bias ? c.fromHost([N], randomBf16(N, 5, -0.5, 0.5)) : undefined;
      for (const p of run(x, w, b)) {
        const [got, want] = [new Float32Array(p.bits.buffer), new Float32Array(p.expected.buffer)];
        let same = 0;
        for (let i = 0; i < got.length; i++) {
          // a bf16 rounding (silu_mul: of both factors) over the fp32 sums' difference, which grows with K
          assert.ok(Math.abs(got[i]! - want[i]!) <= Math.abs(want[i]!) / (silu ? 32 : 128) + K * 1.5e-8,
            `${p.rows} rows from ${p.start}, output ${i}: ${got[i]} vs ${want[i]}`);
          if (got[i] === want[i]) same++;
        }
        assert.ok(same > got.length / 2, `${p.rows} rows from ${p.start}: ${same} of ${got.length} equal`);
      }
    });
  }

  test('without chainShortRing a split grid of more than one wave runs unsplit: qwen3-8b\'s qkv, cuBLASLt\'s bits',
    (t) => {
      const d = cuda!.device;
      const [N, K] = [6144, 4096];
      const plan = planChainGemm(1, N, K, d.numSMs)!;
      assert.equal(plan.kernel, 'gemm_chain_p8_s2');
      const fit = d.blocksPerSM('gemm_chain.cu', plan.kernel, plan.block, plan.sharedBytes) * d.numSMs;
      if (plan.grid[0] <= fit) return t.skip(`${plan.grid[0]} blocks fit one wave of ${fit} here`);
      const c = newCuda({ chainShortRing: false });
      try {
        const x = c.fromHost([ROWS, K], randomBf16(ROWS * K, 7, -2, 2));
        const w = c.fromHost([N, K], randomBf16(N * K, 8, -0.05, 0.05));
        begin(c);
        const whole = bitsOf(c, c.matmul(x, w, 'test'));
        for (const [start, rows] of steps) {
          begin(c);
          assertSameBits(bitsOf(c, c.matmul(rowsOf(x, start, rows), w, 'test')),
            whole.slice(start * N, (start + rows) * N), `${rows} rows from ${start}`);
        }
      } finally {
        c.dispose();
      }
    });
  test('with chainShortRing a split grid of more than one wave runs split on 8-stage rings (qwen3-8b\'s qkv)', (t) => {
    const [N, K] = [6144, 4096];
    const plan = planChainGemm(1, N, K, cuda!.device.numSMs)!;
    const d = cuda!.device;
    const fit = d.blocksPerSM('gemm_chain.cu', plan.kernel, plan.block, plan.sharedBytes) * d.numSMs;
    if (plan.grid[0] <= fit) return t.skip(`${plan.grid[0]} blocks fit one wave of ${fit} here`);
    const c = newCuda({ chainShortRing: true });
    try {
      const cases: [Float32Array, Float32Array, boolean][] = [
        [integers(ROWS * K, 7, 5), integers(N * K, 13, 9), true],
        [randomBf16(ROWS * K, 7, -2, 2), randomBf16(N * K, 8, -0.05, 0.05), false]];
      for (const [xv, wv, exact] of cases) {
        const x = c.fromHost([ROWS, K], xv);
        const w = c.fromHost([N, K], wv);
        begin(c);
        const whole = bitsOf(c, c.matmul(x, w, 'test'));
        const before = c.numChainGemms;
        let differ = 0;
        for (const [start, rows] of steps) {
          begin(c);
          const got = bitsOf(c, c.matmul(rowsOf(x, start, rows), w, 'test'));
          const want = whole.slice(start * N, (start + rows) * N);
          if (exact) assertSameBits(got, want, `integers, ${rows} rows from ${start}`);
          else differ += got.filter((b, i) => b !== want[i]).length;
        }
        assert.equal(c.numChainGemms, before + steps.length, 'every small step ran the chain kernel');
        if (!exact) assert.ok(differ > 0, 'random data: the halves\' sums are not cuBLASLt\'s (the split ran)');
      }
    } finally {
      c.dispose();
    }
  });
});
