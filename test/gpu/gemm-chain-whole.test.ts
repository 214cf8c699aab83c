// gemm_chain_whole (kernels/gemm_chain.cu) at every token count it can take: QUIRE_CHAIN_WHOLE=8 lets it run steps of
// up to 8 tokens on narrow weights (by default it takes one), and each row must still be bit-identical to the same row
// of cuBLASLt's GEMM at 256 rows (its chain order) on qwen3-0.6b's o and down and the demo model's o.
// The variable is read when gemm-chain.ts loads, so this file sets it before importing the backend.

import { after, describe, test } from 'node:test';
import assert from 'node:assert/strict';

process.env.QUIRE_CHAIN_WHOLE = '8';
const { planChainGemm } = await import('../../src/backend/cuda/gemm-chain.js');
const { CudaTensor } = await import('../../src/backend/cuda/cuda-backend.js');
const { batchOf } = await import('../backend/helpers.js');
const { assertSameBits, bitsOf, newCuda, noCuda, randomBf16 } = await import('./cuda-helpers.js');

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
      const begin = () => {
        c.beginStep(batchOf([{ ids: [1], start: 0, pages: [0] }], 16));
        c.fillWorkspace(0xff);
      };
      begin();
      const before = c.numChainGemms;
      const whole = bitsOf(c, c.matmul(x, w, 'test'));
      assert.equal(c.numChainGemms, before, '256 rows go to cuBLASLt');
      const steps = [[0, 1], [254, 2], [3, 5], [100, 8], [248, 8]] as const;
      for (const [start, rows] of steps) {
        begin();
        assertSameBits(bitsOf(c, c.matmul(new CudaTensor([rows, K], x.ptr + BigInt(start * K * 2)), w, 'test')),
          whole.slice(start * N, (start + rows) * N), `${rows} rows from ${start}`);
      }
      assert.equal(c.numChainGemms, before + steps.length, 'every small step ran gemm_chain_whole');
    });
  }
});
