// GGUF projections kept as llama.cpp's blocks on CUDA (uploadGguf; kernels/gguf.cu, gguf-gemm.ts) against the CPU
// backend's matmul on the same blocks dequantized (gguf-quants.ts, the reference), per block format: the GEMV at 1, 3
// and 8 tokens (its weights decoded exactly, so only the sums' order and the bf16 output differ), 64 tokens through
// the dequantized bf16 weight and cuBLASLt; a fused projection mixing formats, with a bias, in GEMV passes and in
// slices of the dequantized weight; the batch-invariant mode.

import { after, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import type { Tensor } from '../../src/backend/backend.js';
import type { CudaBackend } from '../../src/backend/cuda/cuda-backend.js';
import { dequantize } from '../../src/loader/gguf-quants.js';
import type { GgufBlocks, GgufBlockType } from '../../src/loader/types.js';
import { hostF32 } from '../backend/helpers.js';
import { randomGgufBlocks } from '../backend/gguf-helpers.js';
import { assertBf16Close, assertSameBits, beginPoisonedStep as begin, bitsOf, newCpu, newCuda, noCuda,
  randomBf16 } from './cuda-helpers.js';

const TYPES: GgufBlockType[] = ['Q8_0', 'Q4_0', 'Q4_K', 'Q5_K', 'Q6_K'];

/** Parts of `types` (rows each), random blocks of K columns, as the loader hands them, and their values concatenated. */
function partsOf(spec: [GgufBlockType, number][], K: number, seed: number): { parts: GgufBlocks[]; values: Float32Array } {
  const parts = spec.map(([type, rows], i): GgufBlocks =>
    ({ name: `p${i}`, type, shape: [rows, K], data: randomGgufBlocks(type, rows, K, seed + i, 0.004) }));
  const values = new Float32Array(spec.reduce((n, [, rows]) => n + rows, 0) * K);
  let at = 0;
  for (const p of parts) {
    values.set(dequantize(p.type, p.data, p.shape[0] * K), at);
    at += p.shape[0] * K;
  }
  return { parts, values };
}

describe('CUDA GGUF linear layers', { skip: noCuda }, () => {
  const cpu = newCpu();
  const cudas: CudaBackend[] = [];
  const cuda = (opts: Parameters<typeof newCuda>[0] = {}): CudaBackend => {
    const c = newCuda(opts);
    cudas.push(c);
    return c;
  };
  after(() => {
    cpu.dispose();
    cudas.forEach((c) => c.dispose());
  });

  /** The CUDA matmul of x [T, K] by w against the CPU's on the dequantized values; the CUDA output's bits. */
  function check(c: CudaBackend, w: Tensor, values: Float32Array, N: number, K: number, T: number, what: string,
    bias: Float32Array | null = null): Uint32Array {
    const x = randomBf16(64 * K, 31 + K, -2, 2).slice(0, T * K);  // the same first rows at every T
    const wc = cpu.upload(hostF32('w', [N, K], values));
    const bc = bias ? cpu.upload(hostF32('b', [N], bias)) : null;
    const want = cpu.toHost(cpu.matmul(cpu.upload(hostF32('x', [T, K], x)), wc, 'test', bc));
    begin(c);
    const out = c.matmul(c.fromHost([T, K], x), w, 'test', bias ? c.fromHost([N], bias) : null);
    const got = c.toHost(out);
    assertBf16Close(got, want, `${what}, ${T} tokens`);
    return bitsOf(c, out);
  }

  const K = 1024;
  for (const type of TYPES) {
    test(`${type}: matmul at 1, 3, 8 and 64 tokens equals the CPU's on the dequantized weight`, () => {
      const c = cuda();
      const N = 90;  // not a multiple of the GEMV's rows a block
      const { parts, values } = partsOf([[type, N]], K, 5);
      const before = c.memory().weightBytes;
      const w = c.uploadGguf('w', parts);
      assert.deepEqual(w.shape, [N, K]);
      assert.equal(w.quantized, 'gguf');
      assert.equal(w.storedBytes, parts[0]!.data.byteLength, 'the blocks\' bytes, d moved but kept');
      assert.equal(c.memory().weightBytes - before, w.storedBytes);
      const first: Uint32Array[] = [];
      for (const T of [1, 3, 8, 64]) first.push(check(c, w, values, N, K, T, type).slice(0, N));
      // the GEMV's token sums do not depend on the step's other tokens (x's first row is the same at every T)
      assertSameBits(first[1]!, first[0]!, `${type}: token 0 at 3 tokens vs alone`);
      assertSameBits(first[2]!, first[0]!, `${type}: token 0 at 8 tokens vs alone`);
    });
  }

  test('a fused projection of Q4_K, Q4_K and Q6_K parts with a bias: GEMV passes, and the dequantized weight in slices', () => {
    const spec: [GgufBlockType, number][] = [['Q4_K', 64], ['Q4_K', 32], ['Q6_K', 32]];
    const N = 128;
    const { parts, values } = partsOf(spec, 512, 9);
    const bias = randomBf16(N, 4, -1, 1);
    // 16 tokens on the GEMV: two passes; a scratch of 80 rows: slices [0, 80) and [80, 128), the second across formats
    const c = cuda({ gguf: { gemvMaxTokens: 16, scratchBytes: 80 * 512 * 2 } });
    const w = c.uploadGguf('qkv', parts);
    assert.equal(w.storedBytes, parts.reduce((n, p) => n + p.data.byteLength, 0));
    for (const T of [1, 5, 12, 16, 40]) check(c, w, values, N, 512, T, 'fused Q4_K + Q6_K', bias);
  });

  test('the batch-invariant mode: a token\'s outputs the same bits at 1, 3 and 64 tokens', () => {
    const c = cuda({ batchInvariant: true });
    const { parts, values } = partsOf([['Q4_K', 64], ['Q6_K', 64]], K, 13);
    const w = c.uploadGguf('w', parts);
    const alone = check(c, w, values, 128, K, 1, 'batch-invariant');
    for (const T of [3, 64]) {
      assertSameBits(check(c, w, values, 128, K, T, 'batch-invariant').slice(0, 128), alone, `${T} tokens`);
    }
  });

  test('an op other than matmul refuses a GGUF weight, naming it', () => {
    const c = cuda();
    const w = c.uploadGguf('w', partsOf([['Q8_0', 16]], 256, 2).parts);
    begin(c);
    assert.throws(() => c.rmsNorm(w, c.fromHost([256], randomBf16(256, 1)), 1e-6), /GGUF-quantized weight/);
  });
});
