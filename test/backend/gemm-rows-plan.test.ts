// Plans of the batch-invariant GEMM (gemm-rows.ts): the slicing of K (the summation order) depends on K alone,
// and every plan's grid covers all rows and outputs within the shared memory a block may take (48 KiB unless the
// variant keeps its slice sums there).

import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { blockTile, defaultVariant, GEMM_ROWS_VARIANTS, numSlices, planGemmRows, sliceChunks } from '../../src/backend/cuda/gemm-rows.js';

test('K is cut in at most 16 slices of at least 8 chunks of 32 that cover it', () => {
  for (let K = 8; K <= 32768; K += 8) {
    const chunks = Math.ceil(K / 32);
    const [c, s] = [sliceChunks(K), numSlices(K)];
    assert.ok(c >= 8 && s >= 1 && s <= 16, `K ${K}: ${s} slices of ${c}`);
    assert.ok(s * c >= chunks && (s - 1) * c < chunks, `K ${K}: ${s} slices of ${c} for ${chunks} chunks`);
  }
  assert.deepEqual([1024, 2048, 3072, 4096, 12288].map(numSlices), [4, 8, 12, 16, 16]);
});

test('every variant covers every row and output column within the shared memory a block may take', () => {
  fc.assert(fc.property(fc.integer({ min: 1, max: 600 }), fc.integer({ min: 1, max: 160000 }),
    fc.integer({ min: 1, max: 2048 }), fc.integer({ min: 0, max: GEMM_ROWS_VARIANTS.length }), (T, N, k8, v) => {
      const K = 8 * k8;
      const variant = GEMM_ROWS_VARIANTS[v] ?? defaultVariant(T, N);
      const plan = planGemmRows(T, N, K, variant);
      const { rows, tokens } = blockTile(variant);
      assert.ok(plan.grid[0] * rows >= N && (plan.grid[0] - 1) * rows < N);
      assert.ok(plan.grid[1] * tokens >= T && (plan.grid[1] - 1) * tokens < T);
      assert.equal(plan.sliceChunks, sliceChunks(K));
      assert.ok(plan.sharedBytes <= (variant.smemSum ? 227 : 48) * 1024 && plan.block <= 512 && plan.block % 32 === 0);
      assert.match(plan.kernel, new RegExp(`^gemm_rows_${variant.kind}_(w\\dx\\d_)?m${variant.mt}_n${variant.nt}$`));
    }));
  assert.throws(() => planGemmRows(1, 16, 100), /K 100 is not a multiple of 8/);
});
