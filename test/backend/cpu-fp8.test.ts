// Block-FP8 weights on the CPU backend: uploadFp8Block fuses parts by rows, and matmul is fp8BlockMatmul exactly.

import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import type { Fp8BlockPart } from '../../src/backend/backend.js';
import { CpuBackend } from '../../src/backend/cpu/cpu-backend.js';
import { f32ToBytes } from '../../src/loader/dtype.js';
import { fp8BlockMatmul, quantizeWeightBlocks } from '../../src/backend/fp8-linear.js';
import { hostF32, randomArray } from './helpers.js';

const backends = [new CpuBackend({ kvCacheBytes: 0, numThreads: 1, kernel: 'js' }),
  new CpuBackend({ kvCacheBytes: 0, numThreads: 1, kernel: 'wasm' })];
after(() => backends.forEach((b) => b.dispose()));

const K = 320;  // two whole 128-column groups and half of one

/** A part of n rows as a checkpoint stores it: weights of a magnitude of their own, quantized per 128 x 128 block. */
function part(name: string, n: number, seed: number, scale: number): { part: Fp8BlockPart; q: Float32Array; s: Float32Array } {
  const { q, scaleInv: s } = quantizeWeightBlocks(randomArray(n * K, seed, -scale, scale), n, K);
  return {
    part: { weight: { name, dtype: 'f8_e4m3', shape: [n, K], data: f32ToBytes('f8_e4m3', q) },
      scaleInv: { name: `${name}_scale_inv`, dtype: 'f32', shape: [n / 128, 3], data: f32ToBytes('f32', s) } },
    q, s,
  };
}

const parts = [part('gate_proj.weight', 256, 1, 0.05), part('up_proj.weight', 128, 2, 3)];
// three tokens, the groups of each of very different magnitudes (each has a scale of its own)
const T = 3;
const x = randomArray(T * K, 7).map((v, i) => v * [1, 40, 0.01][Math.floor((i % K) / 128)]! * (1 + Math.floor(i / K)));

for (const b of backends) {
  test(`${b.kernel}: matmul on a block-FP8 weight is fp8BlockMatmul of each part, bit for bit`, () => {
    const w = b.uploadFp8Block('mlp.gate_up_proj.weight', parts.map((p) => p.part));
    assert.deepEqual(w.shape, [384, K]);
    assert.equal(w.quantized, 'fp8_block');
    const y = b.toHost(b.matmul(b.upload(hostF32('x', [T, K], x)), w));
    for (let t = 0; t < T; t++) {
      let col = 0;
      for (const p of parts) {
        const n = p.part.weight.shape[0]!;
        const expected = fp8BlockMatmul(x.subarray(t * K, (t + 1) * K), 1, K, p.q, p.s, n);
        assert.deepEqual(y.subarray(t * 384 + col, t * 384 + col + n), expected, `token ${t}, ${p.part.weight.name}`);
        col += n;
      }
    }
  });
}

test('matmulSiluMul on a block-FP8 gate_up is siluMul of its matmul; a bias on one is refused', () => {
  const b = backends[0]!;
  const w = b.uploadFp8Block('mlp.gate_up_proj.weight', [part('gate', 128, 3, 0.1).part, part('up', 128, 4, 0.1).part]);
  const xs = b.upload(hostF32('x', [T, K], x));
  assert.deepEqual(b.toHost(b.matmulSiluMul(xs, w)), b.toHost(b.siluMul(b.matmul(xs, w))));
  assert.throws(() => b.matmul(xs, w, 'gate_up', b.upload(hostF32('bias', [256], new Float32Array(256)))), /bias on a block-FP8 weight/);
});

test('uploadFp8Block refuses parts that do not hold whole blocks, and scales of another shape or dtype', () => {
  const b = backends[0]!;
  const before = b.memory().weightBytes;
  b.uploadFp8Block('w', [parts[1]!.part]);
  assert.equal(b.memory().weightBytes - before, 128 * K * 4 + 3 * 4, 'held as f32 here');
  const { weight, scaleInv } = parts[1]!.part;
  assert.throws(() => b.uploadFp8Block('w', [{ weight: { ...weight, shape: [64, 640] }, scaleInv }]),
    /uploadFp8Block w: part up_proj.weight is f8_e4m3 \[64, 640\], expected f8_e4m3 \[a multiple of 128, 640\]/);
  assert.throws(() => b.uploadFp8Block('w', [{ weight: { ...weight, dtype: 'bf16', shape: [128, 160] }, scaleInv }]), /is bf16/);
  assert.throws(() => b.uploadFp8Block('w', [{ weight, scaleInv: { ...scaleInv, shape: [3, 1] } }]),
    /scales up_proj.weight_scale_inv are f32 \[3, 1\], expected f32 \[1, 3\]/);
});
