// gemm_rows (the GEMM of the batch-invariant mode) is batch-invariant: a row's output bits are the same
// whatever variant, tile and grid the plan picks, alone or at any offset of a batch of up to 300 rows, and in a
// mixed step of a batch-invariant backend; and it matches the CPU backend within bf16 tolerance, with a bias too. Outputs
// start as NaN.

import { after, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { CudaTensor, type CudaBackend } from '../../src/backend/cuda/cuda-backend.js';
import { GEMM_ROWS_VARIANTS, planGemmRows, type GemmRowsVariant } from '../../src/backend/cuda/gemm-rows.js';
import { i32, ptr } from '../../src/backend/cuda/device.js';
import { batchOf } from '../backend/helpers.js';
import { assertBf16Close, newCpu, newCuda, noCuda, randomBf16, uploadBoth } from './cuda-helpers.js';

const ROWS = 300;

/** Bit equality of two [rows, N] outputs, naming how many elements differ and the first one. */
function assertSameBits(actual: Uint32Array, expected: Uint32Array, N: number, what: string): void {
  assert.equal(actual.length, expected.length, `${what}: length`);
  let first = -1;
  let count = 0;
  for (let i = 0; i < actual.length; i++) {
    if (actual[i] !== expected[i]) {
      if (first < 0) first = i;
      count++;
    }
  }
  assert.equal(count, 0, `${what}: ${count} of ${actual.length} differ, first at row ${Math.floor(first / N)} column ${first % N}`);
}

describe('CUDA gemm_rows batch invariance', { skip: noCuda }, () => {
  const cuda = noCuda ? null : newCuda();
  after(() => cuda?.dispose());

  /** y = x[rows from `start`] w^T through one explicit variant, y poisoned first. */
  function run(c: CudaBackend, x: CudaTensor, w: CudaTensor, start: number, rows: number,
    variant?: GemmRowsVariant): Uint32Array {
    const [K, N] = [x.shape[1]!, w.shape[0]!];
    const y = c.device.alloc(rows * N * 2);
    c.device.fillBytesAsync(y, 0xff, rows * N * 2);
    const plan = planGemmRows(rows, N, K, variant);
    c.device.launch('gemm_rows.cu', plan.kernel, plan.grid, plan.block, [ptr(x.ptr + BigInt(start * K * 2)),
      ptr(w.ptr), ptr(y), ptr(0n), i32(rows), i32(N), i32(K), i32(plan.sliceChunks)], plan.sharedBytes);
    const out = c.toHost(new CudaTensor([rows, N], y));
    c.device.free(y);
    assert.equal(out.findIndex((v) => !Number.isFinite(v)), -1, `${plan.kernel}: an output never written`);
    return new Uint32Array(out.buffer);
  }

  // K 1032: a last chunk of 8; 3072: 12 slices; 12288: 24 chunks per slice. N 200: a partial row tile.
  for (const [N, K] of [[200, 1032], [96, 3072], [64, 12288]] as const) {
    test(`every variant, every row count and offset gives the same bits, N ${N} K ${K}`, () => {
      const c = cuda!;
      const x = c.fromHost([ROWS, K], randomBf16(ROWS * K, 1 + K));
      const w = c.fromHost([N, K], randomBf16(N * K, 2 + N));
      const whole = run(c, x, w, 0, ROWS, GEMM_ROWS_VARIANTS[0]);
      for (const variant of GEMM_ROWS_VARIANTS) {
        assertSameBits(run(c, x, w, 0, ROWS, variant), whole, N, `${variant.kind} m${variant.mt} n${variant.nt}`);
      }
      for (const [start, rows] of [[0, 1], [137, 1], [299, 1], [5, 7], [40, 17], [3, 64], [100, 129], [44, 256]]) {
        assertSameBits(run(c, x, w, start, rows), whole.slice(start * N, (start + rows) * N), N, `${rows} rows from ${start}`);
      }
    });
  }

  test('a batch-invariant backend runs a mixed step on gemm_rows: each row has its bits alone, close to the CPU', () => {
    const c = newCuda({ batchInvariant: true });
    const cpu = newCpu();
    const [N, K] = [256, 512];
    // seqs: decode, decode, a 300-token chunk, decode
    const batch = batchOf([{ ids: [1], start: 4, pages: [0] }, { ids: [2], start: 9, pages: [1] },
      { ids: Array.from({ length: 300 }, (_, i) => i % 50), start: 0, pages: Array.from({ length: 19 }, (_, i) => 2 + i) },
      { ids: [3], start: 2, pages: [21] }], 16);
    const T = batch.numTokens;
    const [xc, xg] = uploadBoth(cpu, c, 'x', [T, K], randomBf16(T * K, 31));
    const [wc, wg] = uploadBoth(cpu, c, 'w', [N, K], randomBf16(N * K, 32));
    c.beginStep(batch);
    c.fillWorkspace(0xff);
    cpu.beginStep(batch);
    const mixed = c.toHost(c.matmul(xg, wg, 'test'));
    assertBf16Close(mixed, cpu.toHost(cpu.matmul(xc, wc)), 'mixed step');
    const mixedBits = new Uint32Array(mixed.buffer);
    for (const row of [0, 1, 2, 150, T - 1]) {
      assertSameBits(run(c, xg as CudaTensor, wg as CudaTensor, row, 1), mixedBits.slice(row * N, (row + 1) * N), N,
        `row ${row}`);
    }
    // a bias (Qwen2's qkv) is added in the kernel, before the rounding
    const [bc, bg] = uploadBoth(cpu, c, 'b', [N], randomBf16(N, 33, -0.5, 0.5));
    assertBf16Close(c.toHost(c.matmul(xg, wg, 'test', bg)), cpu.toHost(cpu.matmul(xc, wc, 'test', bc)), 'with a bias');
    cpu.dispose();
    c.dispose();
  });
});
