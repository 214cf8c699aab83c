// Every CUDA op against the CPU reference on the same random inputs, with the
// CUDA outputs poisoned (NaN) before the op runs.

import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import type { CpuBackend } from '../../src/backend/cpu/cpu-backend.js';
import type { CudaBackend, CudaTensor } from '../../src/backend/cuda/cuda-backend.js';
import { defaultInvFreq } from '../../src/model/rope.js';
import { batchOf } from '../backend/helpers.js';
import { assertBf16Close, newCpu, newCuda, noCuda, randomBf16, uploadBoth } from './cuda-helpers.js';

describe('CUDA ops vs CPU', { skip: noCuda }, () => {
  let cpu: CpuBackend;
  let cuda: CudaBackend;
  const T = 13;
  const batch = batchOf([{ ids: [5, 17, 3, 99, 42, 0, 7], start: 0, pages: [0] },
    { ids: [8, 1, 2, 64, 33, 21], start: 9, pages: [1, 2] }], 16, [6, 12, 3]);

  before(() => {
    cpu = newCpu();
    cuda = newCuda();
  });
  after(() => {
    cpu?.dispose();
    cuda?.dispose();
  });

  const begin = () => {
    const steps = [cpu.beginStep(batch), cuda.beginStep(batch)] as const;
    cuda.fillWorkspace(0xff);
    return steps;
  };

  test('embedding gathers rows of the table', () => {
    const [tc, tg] = uploadBoth(cpu, cuda, 'embed', [128, 96], randomBf16(128 * 96, 1));
    const [sc, sg] = begin();
    assertBf16Close(cuda.toHost(cuda.embedding(tg, sg)), cpu.toHost(cpu.embedding(tc, sc)), 'embedding', 0);
  });

  // 320, 1024 (a block of 40 / 128 threads), 4096, 8192: rows held in registers (16-byte chunks);
  // 100 (not a multiple of 8), 12288 (too long): strided
  for (const H of [320, 1024, 4096, 8192, 100, 12288]) {
    test(`rmsNorm, hidden ${H}`, () => {
      const [xc, xg] = uploadBoth(cpu, cuda, 'x', [T, H], randomBf16(T * H, 2 + H, -3, 3));
      const [wc, wg] = uploadBoth(cpu, cuda, 'w', [H], randomBf16(H, 3, 0.5, 1.5));
      begin();
      assertBf16Close(cuda.toHost(cuda.rmsNorm(xg, wg, 1e-6)), cpu.toHost(cpu.rmsNorm(xc, wc, 1e-6)), 'rmsNorm');
    });

    test(`addRmsNorm adds into the residual and normalises it, hidden ${H}`, () => {
      const [xc, xg] = uploadBoth(cpu, cuda, 'x', [T, H], randomBf16(T * H, 4 + H));
      const [rc, rg] = uploadBoth(cpu, cuda, 'r', [T, H], randomBf16(T * H, 5 + H));
      const [wc, wg] = uploadBoth(cpu, cuda, 'w', [H], randomBf16(H, 6, 0.5, 1.5));
      begin();
      const outG = cuda.toHost(cuda.addRmsNorm(xg, rg, wg, 1e-5));
      const outC = cpu.toHost(cpu.addRmsNorm(xc, rc, wc, 1e-5));
      assertBf16Close(outG, outC, 'addRmsNorm out');
      assertBf16Close(cuda.toHost(rg), cpu.toHost(rc), 'addRmsNorm residual');
    });
  }

  for (const [M, N, K] of [[T, 384, 256], [1, 1000, 512], [5, 2050, 1032], [8, 96, 3072], [64, 96, 1024]] as const) {
    test(`matmul y[${M}, ${N}] = x[${M}, ${K}] w[${N}, ${K}]^T`, () => {
      const [xc, xg] = uploadBoth(cpu, cuda, 'x', [M, K], randomBf16(M * K, 7 + K));
      const [wc, wg] = uploadBoth(cpu, cuda, 'w', [N, K], randomBf16(N * K, 8 + N));
      begin();
      assertBf16Close(cuda.toHost(cuda.matmul(xg, wg, 'test')), cpu.toHost(cpu.matmul(xc, wc)), 'matmul');
    });
  }

  // head dims 64 / 128 / 256: one, two and four pairs per lane (kernels/rope.cu); 6 heads on 4 warps
  for (const [withNorm, D] of [[true, 128], [false, 128], [true, 64], [true, 256]] as const) {
    test(`qkNormRope ${withNorm ? 'with' : 'without'} q/k norm, head dim ${D}, in place, v untouched`, () => {
      const [H, KV] = [4, 2];
      const width = (H + 2 * KV) * D;
      const [qc, qg] = uploadBoth(cpu, cuda, 'qkv', [T, width], randomBf16(T * width, 9, -2, 2));
      const [nqc, nqg] = uploadBoth(cpu, cuda, 'qn', [D], randomBf16(D, 10, 0.5, 1.5));
      const [nkc, nkg] = uploadBoth(cpu, cuda, 'kn', [D], randomBf16(D, 11, 0.5, 1.5));
      const rope = { headDim: D, invFreq: defaultInvFreq(D, 1e6) };
      const [sc, sg] = begin();
      const before = cuda.toHost(qg);
      cuda.qkNormRope(qg, withNorm ? nqg : null, withNorm ? nkg : null, 1e-6, H, KV, rope, sg);
      cpu.qkNormRope(qc, withNorm ? nqc : null, withNorm ? nkc : null, 1e-6, H, KV, rope, sc);
      const out = cuda.toHost(qg);
      assertBf16Close(out, cpu.toHost(qc), 'qkNormRope');
      for (let t = 0; t < T; t++) {
        const v = (H + KV) * D;
        assert.deepEqual(out.subarray(t * width + v, (t + 1) * width), before.subarray(t * width + v, (t + 1) * width));
      }
    });
  }

  // 352 columns: 16-byte chunks per thread; 350: one column per thread
  for (const I of [352, 350]) {
    test(`siluMul, ${I} columns`, () => {
      const [gc, gg] = uploadBoth(cpu, cuda, 'gu', [T, 2 * I], randomBf16(T * 2 * I, 12, -4, 4));
      begin();
      assertBf16Close(cuda.toHost(cuda.siluMul(gg)), cpu.toHost(cpu.siluMul(gc)), 'siluMul');
    });
  }

  // 4096 columns: 16-byte chunks per thread; 350 (13 x 350 not a multiple of 8): one element per thread. Gates far
  // out on both sides saturate the sigmoid at 0 and 1.
  for (const N of [4096, 350]) {
    test(`sigmoidMul, ${N} columns, into a new tensor`, () => {
      const x = randomBf16(T * N, 14 + N, -3, 3);
      const [xc, xg] = uploadBoth(cpu, cuda, 'x', [T, N], x);
      const [gc, gg] = uploadBoth(cpu, cuda, 'g', [T, N], randomBf16(T * N, 15 + N, -30, 30));
      begin();
      const out = cuda.sigmoidMul(xg, gg);
      assert.notEqual((out as CudaTensor).ptr, (xg as CudaTensor).ptr);
      assertBf16Close(cuda.toHost(out), cpu.toHost(cpu.sigmoidMul(xc, gc)), 'sigmoidMul');
      assert.deepEqual(cuda.toHost(xg), x, 'x untouched');
    });
  }

  for (const N of [256, 350]) {
    test(`addSigmoidGated adds sigmoid(gate) * y to acc in place, ${N} columns (a gated shared expert)`, () => {
      const [ac, ag] = uploadBoth(cpu, cuda, 'acc', [T, N], randomBf16(T * N, 16 + N, -2, 2));
      const [gc, gg] = uploadBoth(cpu, cuda, 'g', [T, 1], randomBf16(T, 17 + N, -8, 8));
      const y = randomBf16(T * N, 18 + N, -2, 2);
      const [yc, yg] = uploadBoth(cpu, cuda, 'y', [T, N], y);
      begin();
      cuda.addSigmoidGated(ag, gg, yg);
      cpu.addSigmoidGated(ac, gc, yc);
      assertBf16Close(cuda.toHost(ag), cpu.toHost(ac), 'addSigmoidGated');
      assert.deepEqual(cuda.toHost(yg), y, 'y untouched');
    });
  }

  test('gatherLogitRows picks the logits rows in order', () => {
    const [xc, xg] = uploadBoth(cpu, cuda, 'x', [T, 160], randomBf16(T * 160, 13));
    const [sc, sg] = begin();
    assertBf16Close(cuda.toHost(cuda.gatherLogitRows(xg, sg)), cpu.toHost(cpu.gatherLogitRows(xc, sc)), 'gather', 0);
  });

  test('memory(): the utilization\'s share of the device less what this engine holds, never more than is free', () => {
    // other processes (a test file beside this one) may hold or free memory meanwhile: only this engine's own
    // allocations count against its share, and the free memory caps it
    const freeBefore = cuda.device.memInfo().freeBytes;
    const m = cuda.memory();
    const free = Math.max(freeBefore, cuda.device.memInfo().freeBytes);
    assert.ok(m.totalBytes > 0 && m.weightBytes > 0);
    assert.ok(m.availableKvBytes <= 0.9 * m.totalBytes - cuda.device.allocatedBytes,
      `${m.availableKvBytes} beyond 0.9 of ${m.totalBytes} less ${cuda.device.allocatedBytes} held`);
    assert.ok(m.availableKvBytes <= free, `${m.availableKvBytes} of ${free} free`);
  });
});
