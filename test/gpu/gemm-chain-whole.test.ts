// gemm_chain_whole (kernels/gemm_chain.cu) at every token count it can take: QUIRE_CHAIN_WHOLE=8 lets it run steps of
// up to 8 tokens on narrow weights (by default it takes one), and unsplit (QUIRE_CHAIN_WHOLE_SPLIT=0) each row must
// still be bit-identical to the same row of cuBLASLt's GEMM at 256 rows (its chain order) on qwen3-0.6b's o and down
// and the demo model's o. Split between 2 to 8 warps, each slice is a chain from zero and the slices are added in
// order: exact where every order is (integer products), that order where the order shows, close to the chain elsewhere.
// The variables are read when gemm-chain.ts loads, so this file sets them before importing the backend.

import { after, describe, test } from 'node:test';
import assert from 'node:assert/strict';

process.env.QUIRE_CHAIN_WHOLE = '8';
process.env.QUIRE_CHAIN_WHOLE_SPLIT = '0';
const { planChainGemm } = await import('../../src/backend/cuda/gemm-chain.js');
const { CudaTensor } = await import('../../src/backend/cuda/cuda-backend.js');
const { assertSameBits, beginPoisonedStep, bitsOf, newCuda, noCuda, randomBf16, rowsOf } = await import('./cuda-helpers.js');
const { f32, i32, ptr } = await import('../../src/backend/cuda/device.js');

const ROWS = 256;

describe('CUDA gemm_chain_whole, 1 to 8 tokens', { skip: noCuda }, () => {
  const cuda = noCuda ? null : newCuda();
  after(() => cuda?.dispose());
  for (const [N, K] of [[1024, 2048], [1024, 3072], [256, 256]] as const) {
    test(`rows of 1 to 8 tokens give cuBLASLt's bits at 256 rows, N ${N} K ${K}`, () => {
      const c = cuda!;
      for (const T of [1, 2, 8]) assert.equal(planChainGemm(T, N, K, c.device.numSMs)?.kernel, 'gemm_chain_whole');
      const x = c.fromHost([ROWS, K], randomBf16(ROWS * K, 5 + K, -2, 2));
      const w = c.fromHost([N, K], randomBf16(N * K, 6 + N, -0.05, 0.05));
      beginPoisonedStep(c);
      const before = c.numChainGemms;
      const whole = bitsOf(c, c.matmul(x, w, 'test'));
      assert.equal(c.numChainGemms, before, '256 rows go to cuBLASLt');
      const steps = [[0, 1], [254, 2], [3, 5], [100, 8], [248, 8]] as const;
      for (const [start, rows] of steps) {
        beginPoisonedStep(c);
        assertSameBits(bitsOf(c, c.matmul(rowsOf(x, start, rows), w, 'test')),
          whole.slice(start * N, (start + rows) * N), `${rows} rows from ${start}`);
      }
      assert.equal(c.numChainGemms, before + steps.length, 'every small step ran gemm_chain_whole');
    });
  }

  /** One token's y = x w^T by gemm_chain_whole with k split between `split` warps, y poisoned first. */
  function runSplit(x: InstanceType<typeof CudaTensor>, w: InstanceType<typeof CudaTensor>, split: number): Uint32Array {
    const c = cuda!;
    const [N, K] = [w.shape[0]!, w.shape[1]!];
    const y = c.device.alloc(N * 2);
    c.device.fillBytesAsync(y, 0xff, N * 2);
    const kernel = split > 1 ? 'gemm_chain_whole_split' : 'gemm_chain_whole';
    c.device.launch('gemm_chain.cu', kernel, [N / 8, 1, 1], 32 * split,
      [ptr(x.ptr), ptr(w.ptr), ptr(y), ptr(0n), i32(1), i32(N), i32(K), ptr(0n), ptr(0n), ptr(0n), ptr(0n), i32(0),
        f32(0)], (K / 64) * (64 + 8) * 16);
    const out = c.toHost(new CudaTensor([1, N], y));
    c.device.free(y);
    return new Uint32Array(out.buffer);
  }

  test('k split between 2 to 8 warps: every slice and row summed, exactly where every order agrees', () => {
    const c = cuda!;
    const [N, K] = [1024, 3072];  // 48 stages
    // small integers: every partial sum is exact in fp32, so any order of the slices gives the whole chain's bits
    const x = c.fromHost([1, K], Float32Array.from({ length: K }, (_, k) => ((k * 7) % 5) - 2));
    const w = c.fromHost([N, K], Float32Array.from({ length: N * K }, (_, i) => ((i * 13) % 9) - 4));
    const whole = runSplit(x, w, 1);
    for (const split of [2, 3, 4, 6, 8]) assertSameBits(runSplit(x, w, split), whole, `${split} slices`);
  });

  test('k split: the slices\' sums are added in slice order', () => {
    const c = cuda!;
    const [N, K] = [8, 3072];  // 3 slices of 1,024 k
    // each row's slices sum to 2^24, 1 and -2^24: (2^24 + 1) - 2^24 is 0 in fp32, any other order 1 or 2^24
    const x = c.fromHost([1, K], new Float32Array(K).fill(1));
    const wv = new Float32Array(N * K);
    for (let r = 0; r < N; r++) {
      for (let k = 0; k < 1024; k++) {
        wv[r * K + k] = 16384;
        wv[r * K + 2048 + k] = -16384;
      }
      wv[r * K + 1024 + r] = 1;
    }
    const w = c.fromHost([N, K], wv);
    assert.deepEqual([...runSplit(x, w, 3)], new Array(N).fill(0));
  });

  test('k split on random data: close to the one chain, and the plan splits qwen3-0.6b\'s down between 3 warps', () => {
    const c = cuda!;
    const [N, K] = [1024, 3072];
    const x = c.fromHost([1, K], randomBf16(K, 31, -2, 2));
    const w = c.fromHost([N, K], randomBf16(N * K, 32, -0.05, 0.05));
    const whole = new Float32Array(runSplit(x, w, 1).buffer);
    for (const split of [3, 6]) {
      const out = new Float32Array(runSplit(x, w, split).buffer);
      let same = 0;
      for (let i = 0; i < N; i++) {
        assert.ok(Math.abs(out[i]! - whole[i]!) <= Math.abs(whole[i]!) / 128 + 1e-6,
          `${split} slices, row ${i}: ${out[i]} vs ${whole[i]}`);
        if (out[i] === whole[i]) same++;
      }
      assert.ok(same > N / 2, `${split} slices: ${same} of ${N} rows equal to the one chain's`);
    }
  });
});

