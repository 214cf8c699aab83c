// The chain GEMM (kernels/gemm_chain.cu) takes steps of up to 8 tokens on wide enough weights and sums in cuBLASLt's
// order: each of its rows is bit-identical to the same row of cuBLASLt's GEMM at 256 rows, and its gate_up + silu_mul
// kernel to cuBLASLt's gate_up followed by silu_mul; with a bias (Qwen2's qkv) both add it before the
// rounding.
// Outputs start as NaN (the workspace is poisoned). Unsplit: QUIRE_CHAIN_SPLIT_K=Infinity keeps each tile's k in one
// warp (gemm-chain-split.test.ts: split between two), read when gemm-chain.ts loads, so it is set before the imports.

import { after, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import type { CudaBackend, CudaTensor } from '../../src/backend/cuda/cuda-backend.js';
import type { ChainSilu } from '../../src/backend/cuda/gemm-chain.js';

process.env.QUIRE_CHAIN_SPLIT_K = 'Infinity';
const { planChainGemm } = await import('../../src/backend/cuda/gemm-chain.js');
const { batchOf } = await import('../backend/helpers.js');
const { assertBf16Close, assertSameBits, beginPoisonedStep: begin, bitsOf, newCpu, newCuda, noCuda, randomBf16, rowsOf,
  uploadBoth } = await import('./cuda-helpers.js');

const ROWS = 256;

describe('CUDA chain GEMM', { skip: noCuda }, () => {
  const cuda = noCuda ? null : newCuda();
  after(() => cuda?.dispose());

  // 0.6b's gate_up and qkv shapes; 8b's down (K 12,288: 192 stages of the ring); narrow weights, one token a step,
  // on gemm_chain_whole: the demo model's o (gemm-chain-whole.test.ts: up to 8 tokens, 0.6b's o and down unsplit, and
  // split k)
  for (const [N, K, kernel] of [[6144, 1024, 'gemm_chain'], [4096, 2048, 'gemm_chain'], [4096, 12288, 'gemm_chain_p8'],
    [256, 256, 'gemm_chain_whole']] as const) {
    test(`rows of 1 to 8 tokens give cuBLASLt's bits at 256 rows, N ${N} K ${K} (${kernel})`, () => {
      const c = cuda!;
      for (const T of [1, 8]) assert.equal(planChainGemm(T, N, K, c.device.numSMs)?.kernel, kernel, 'the plan here');
      const x = c.fromHost([ROWS, K], randomBf16(ROWS * K, 3 + K, -2, 2));
      const w = c.fromHost([N, K], randomBf16(N * K, 4 + N, -0.05, 0.05));
      begin(c);
      const before = c.numChainGemms;
      const whole = bitsOf(c, c.matmul(x, w, 'test'));
      assert.equal(c.numChainGemms, before, '256 rows go to cuBLASLt');
      const steps = [[0, 1], [77, 1], [255, 1], [3, 5], [100, 8]] as const;
      for (const [start, rows] of steps) {
        begin(c);
        assertSameBits(bitsOf(c, c.matmul(rowsOf(x, start, rows), w, 'test')), whole.slice(start * N, (start + rows) * N),
          `${rows} rows from ${start}`);
      }
      assert.equal(c.numChainGemms, before + steps.length, 'every small step ran the chain kernel');
    });
  }

  // Qwen2's qkv: 1.5B's on the ring, 0.5B's (1,152 rows) on gemm_chain_whole
  for (const [N, K] of [[4096, 1024], [1152, 896]] as const) {
    test(`with a bias: 1 to 8 tokens give the bits of cuBLASLt's BIAS epilogue at 256 rows, close to the CPU, N ${N}`, () => {
      const c = cuda!;
      const cpu = newCpu();
      assert.notEqual(planChainGemm(1, N, K, c.device.numSMs), null, 'the plan takes this shape on this GPU');
      const [xc, x] = uploadBoth(cpu, c, 'x', [ROWS, K], randomBf16(ROWS * K, 41, -2, 2));
      const [wc, w] = uploadBoth(cpu, c, 'w', [N, K], randomBf16(N * K, 42, -0.05, 0.05));
      const [bc, b] = uploadBoth(cpu, c, 'b', [N], randomBf16(N, 43, -0.5, 0.5));
      begin(c);
      const before = c.numChainGemms;
      const wholeValues = c.toHost(c.matmul(x, w, 'test', b));
      cpu.beginStep(batchOf([{ ids: [1], start: 0, pages: [0] }], 16));
      assertBf16Close(wholeValues, cpu.toHost(cpu.matmul(xc, wc, 'test', bc)), 'cuBLASLt with a bias against the CPU');
      const whole = new Uint32Array(wholeValues.buffer);
      const steps = [[0, 1], [130, 1], ...(planChainGemm(8, N, K, c.device.numSMs) ? [[7, 8]] : [])] as const;
      for (const [start, rows] of steps) {
        begin(c);
        assertSameBits(bitsOf(c, c.matmul(rowsOf(x as CudaTensor, start, rows), w, 'test', b)),
          whole.slice(start * N, (start + rows) * N), `${rows} rows from ${start}`);
      }
      assert.equal(c.numChainGemms, before + steps.length, 'the small steps ran the chain kernel');
      cpu.dispose();
    });
  }

  // K 1,024 (qwen3-0.6b) and 4,096 (qwen3-8b), each way the chain can apply silu_mul (QUIRE_CHAIN_SILU): none (the
  // chain, then silu_mul), pairs (8 gate rows and their up rows a warp)
  const withSilu = (silu: ChainSilu): CudaBackend => {
    process.env.QUIRE_CHAIN_SILU = silu;
    try {
      return newCuda();
    } finally {
      delete process.env.QUIRE_CHAIN_SILU;
    }
  };
  for (const [N, K] of [[6144, 1024], [6144, 4096]] as const) {
    test(`gate_up with silu_mul on the chain kernel gives the bits of cuBLASLt then silu_mul, K ${K}, every fusion`, () => {
      const [xv, wv] = [randomBf16(ROWS * K, 21, -2, 2), randomBf16(N * K, 22, -0.1, 0.1)];
      const [x, w] = [cuda!.fromHost([ROWS, K], xv), cuda!.fromHost([N, K], wv)];
      begin(cuda!);
      const whole = bitsOf(cuda!, cuda!.siluMul(cuda!.matmul(x, w, 'test')));
      for (const silu of ['none', 'pairs'] as const) {
        const c = withSilu(silu);
        try {
          assert.notEqual(planChainGemm(8, N, K, c.device.numSMs, silu), null, 'the plan takes this shape on this GPU');
          const [xc, wc] = [c.fromHost([ROWS, K], xv), c.fromHost([N, K], wv)];
          const before = c.numChainGemms;
          for (const [start, rows] of [[0, 1], [200, 1], [9, 8], [31, 3]] as const) {
            begin(c);
            assertSameBits(bitsOf(c, c.matmulSiluMul(rowsOf(xc, start, rows), wc)),
              whole.slice(start * N / 2, (start + rows) * N / 2), `${silu}: ${rows} rows from ${start}`);
          }
          assert.equal(c.numChainGemms, before + 4, `${silu}: every small step ran a chain kernel`);
        } finally {
          c.dispose();
        }
      }
    });
  }
});
