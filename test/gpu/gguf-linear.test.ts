// GGUF projections kept as llama.cpp's blocks on CUDA (uploadGguf; kernels/gguf.cu, gguf-gemm.ts), per block format:
// the GEMV at 1 to 8 and 16 tokens (a piece decoded once for every token of a pass; two passes at 16) against a CPU
// model of its arithmetic (the activations quantized to q8 as kernels/gguf_q8.cuh does, bit for bit: quantizeQ8; the
// sums of the dequantized weights times them in double), so only f32 rounding and the bf16 output differ; at K = 4096
// with each row's pieces split among 1, 2 and 4 warps (gguf-gemv-plan.ts); 64 tokens through the dequantized bf16
// weight (staged, coalesced stores; a warp's last units short) and cuBLASLt against the CPU backend's matmul on the
// dequantized weight. The device layout written by gguf_split_blocks against its host model. A fused projection mixing formats, with a bias, in GEMV passes and in slices of the dequantized
// weight; a token's outputs the same bits alone and in a step of others, at every split; the norm (rows held in
// registers by 64 to 256 threads, and the strided path) and silu_mul kernels that write q8 blocks beside their
// outputs give the GEMV the bits it gets quantizing those outputs itself; the batch-invariant mode.

import { after, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import type { Tensor } from '../../src/backend/backend.js';
import type { CudaBackend } from '../../src/backend/cuda/cuda-backend.js';
import { dequantize } from '../../src/loader/gguf-quants.js';
import type { GgufBlocks, GgufBlockType } from '../../src/loader/types.js';
import { ggufDeviceLayout, type GgufWeight } from '../../src/backend/cuda/gguf-layout.js';
import { Q8Tensor } from '../../src/backend/cuda/tensor.js';
import { CudaTensor } from '../../src/backend/cuda/tensor.js';
import { hostF32 } from '../backend/helpers.js';
import { q8MatmulReference, quantizeQ8, randomGgufBlocks } from '../backend/gguf-helpers.js';
import { assertBf16Close, assertSameBits, beginPoisonedStep as begin, bitsOf, newCpu, newCuda, noCuda,
  randomBf16, readDevice } from './cuda-helpers.js';

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

  /**
   * The CUDA matmul of x [T, K] by w; the CUDA output's bits. On the GEMV (T <= gemvMax) against the model of its
   * arithmetic: within a bf16 ulp of the exact sum on the q8 activations (the output rounds once to bf16; f32 sums
   * add a few ulps of f32 of the sum of magnitudes). Else against the CPU's matmul on the dequantized values.
   */
  function check(c: CudaBackend, w: Tensor, values: Float32Array, N: number, K: number, T: number, what: string,
    bias: Float32Array | null = null, gemvMax = 8): Uint32Array {
    const x = randomBf16(64 * K, 31 + K, -2, 2).slice(0, T * K);  // the same first rows at every T
    begin(c);
    const out = c.matmul(c.fromHost([T, K], x), w, 'test', bias ? c.fromHost([N], bias) : null);
    const got = c.toHost(out);
    if (T <= gemvMax) {
      const { y, magnitude } = q8MatmulReference(values, quantizeQ8(x, K), T, N, K);
      for (let i = 0; i < y.length; i++) {
        const want = y[i]! + (bias ? bias[i % N]! : 0);
        const ulp = 2 ** (Math.floor(Math.log2(Math.max(Math.abs(want), 1e-30))) - 7);
        assert.ok(Math.abs(got[i]! - want) <= ulp + 1e-5 * magnitude[i]!,
          `${what}, ${T} tokens, output ${i}: ${got[i]} != ${want} (bf16 ulp ${ulp}, sum of magnitudes ${magnitude[i]})`);
      }
    } else {
      const wc = cpu.upload(hostF32('w', [N, K], values));
      const bc = bias ? cpu.upload(hostF32('b', [N], bias)) : null;
      assertBf16Close(got, cpu.toHost(cpu.matmul(cpu.upload(hostF32('x', [T, K], x)), wc, 'test', bc)), `${what}, ${T} tokens`);
    }
    return bitsOf(c, out);
  }

  const K = 1024;
  const GEMV_TOKENS = [1, 2, 3, 4, 5, 6, 7, 8, 16];
  for (const type of TYPES) {
    test(`${type}: matmul at 1 to 8, 16 and 64 tokens equals the CPU's on the dequantized weight`, () => {
      const c = cuda({ gguf: { gemvMaxTokens: 16 } });
      const N = 90;  // not a multiple of the GEMV's rows a block, nor of a dequantize warp's 32 units (Q6_K)
      const { parts, values } = partsOf([[type, N]], K, 5);
      const before = c.memory().weightBytes;
      const w = c.uploadGguf('w', parts);
      assert.deepEqual(w.shape, [N, K]);
      assert.equal(w.quantized, 'gguf');
      assert.equal(w.storedBytes, parts[0]!.data.byteLength, 'the blocks\' bytes, d moved but kept');
      assert.equal(c.memory().weightBytes - before, w.storedBytes);
      const alone = check(c, w, values, N, K, 1, type, null, 16);
      // the GEMV's token sums do not depend on the step's other tokens (x's first row is the same at every T)
      for (const T of GEMV_TOKENS.slice(1)) {
        assertSameBits(check(c, w, values, N, K, T, type, null, 16).slice(0, N), alone, `${type}: token 0 at ${T} tokens vs alone`);
      }
      check(c, w, values, N, K, 64, type, null, 16);
    });

    test(`${type}: the GEMV at K = 4096 with a row's pieces split among 1, 2 and 4 warps`, () => {
      const N = 90;
      const K4 = 4096;
      const { parts, values } = partsOf([[type, N]], K4, 7);
      for (const split of ['1', '2', '4'] as const) {
        const c = cuda({ gguf: { gemvMaxTokens: 16, gemvSplit: split } });
        const w = c.uploadGguf('w', parts);
        const alone = check(c, w, values, N, K4, 1, `${type} split ${split}`, null, 16);
        for (const T of [2, 5, 8, 16]) {
          assertSameBits(check(c, w, values, N, K4, T, `${type} split ${split}`, null, 16).slice(0, N), alone,
            `${type} split ${split}: token 0 at ${T} tokens vs alone`);
        }
        c.dispose();
        cudas.splice(cudas.indexOf(c), 1);
      }
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
    for (const T of [1, 5, 12, 16, 40]) check(c, w, values, N, 512, T, 'fused Q4_K + Q6_K', bias, 16);
  });

  test('the batch-invariant mode: a token\'s outputs the same bits at 1, 3 and 64 tokens', () => {
    const c = cuda({ batchInvariant: true });
    const { parts, values } = partsOf([['Q4_K', 64], ['Q6_K', 64]], K, 13);
    const w = c.uploadGguf('w', parts);
    // every step takes the bf16 path (gguf-gemm.ts), so no GEMV and no q8 activations at any T: against the CPU's matmul
    const alone = check(c, w, values, 128, K, 1, 'batch-invariant', null, 0);
    for (const T of [3, 64]) {
      assertSameBits(check(c, w, values, 128, K, T, 'batch-invariant', null, 0).slice(0, 128), alone, `${T} tokens`);
    }
  });

  /** A Q8Tensor's blocks as quantizeQ8 gives them for its rows (the GEMV's reference quantizes so). */
  function assertQ8Of(c: CudaBackend, t: Tensor, T: number, K: number, what: string): void {
    const want = quantizeQ8(c.toHost(t), K);
    const q8 = (t as Q8Tensor).q8;
    const gotQ = new Int8Array(c.toHost(new CudaTensor([(T * K) / 4], q8.xq, 'f32')).buffer);
    const gotDs = new Int32Array(c.toHost(new CudaTensor([(T * K) / 16], q8.xds, 'f32')).buffer);
    assert.deepEqual(gotQ, want.q, `${what}: q`);
    assert.deepEqual(new Uint32Array(gotDs.filter((_, i) => i % 2 === 0)), new Uint32Array(want.d.buffer), `${what}: d`);
    assert.deepEqual(gotDs.filter((_, i) => i % 2 === 1), want.s, `${what}: s`);
  }

  // hidden 512: 64 threads a chunk each; 4096: 128 threads, 4 chunks each (an 8B model); 5120: 256 threads, the last
  // chunks' warps past the row; 8448: past the register rows, the strided path and its read-back
  for (const H of [512, 4096, 5120, 8448]) test(`the norm (hidden ${H}) and silu_mul that write q8 beside their outputs: the next GEMV's bits as on the outputs alone`, () => {
    const c = cuda();
    const I = 768;
    const T = 3;
    const o = c.uploadGguf('o', partsOf([['Q4_K', H]], 1024, 21).parts);
    const gateUp = c.uploadGguf('gate_up', partsOf([['Q4_K', 2 * I]], H, 22).parts);
    const down = c.uploadGguf('down', partsOf([['Q6_K', H]], I, 23).parts);
    const norm = c.fromHost([H], randomBf16(H, 24, 0.5, 1.5));
    const residual0 = randomBf16(T * H, 25, -2, 2);
    begin(c);
    const x = c.fromHost([T, 1024], randomBf16(T * 1024, 26, -2, 2));
    const fusedRes = c.fromHost([T, H], residual0);
    const normed = c.matmulAddRmsNorm(x, o, 'o', null, fusedRes, norm, 1e-6);
    assert.ok(normed instanceof Q8Tensor, 'the norm after a GGUF projection wrote q8 blocks');
    const act = c.matmulSiluMul(normed, gateUp);
    assert.ok(act instanceof Q8Tensor, 'silu_mul after a GGUF gate_up wrote q8 blocks');
    const fused = c.matmul(act, down, 'down');
    // the same on plain tensors: the norm and silu_mul kernels, then each GEMV quantizes its input itself
    const plainRes = c.fromHost([T, H], residual0);
    const normedPlain = c.addRmsNorm(c.matmul(x, o, 'o'), plainRes, norm, 1e-6);
    const upPlain = c.matmul(new CudaTensor(normedPlain.shape, (normedPlain as CudaTensor).ptr), gateUp, 'gate_up');
    const actPlain = c.siluMul(upPlain);
    const plain = c.matmul(new CudaTensor(actPlain.shape, (actPlain as CudaTensor).ptr), down, 'down');
    assertSameBits(bitsOf(c, fusedRes), bitsOf(c, plainRes), 'the residual');
    assertSameBits(bitsOf(c, normed), bitsOf(c, normedPlain), 'the normed rows');
    assertSameBits(bitsOf(c, act), bitsOf(c, actPlain), 'silu_mul\'s rows');
    assertSameBits(bitsOf(c, fused), bitsOf(c, plain), 'down\'s outputs');
    // and the q8 blocks are quantizeQ8's of the rows (the GEMV's reference quantizes so)
    assertQ8Of(c, normed, T, H, 'the norm\'s q8');
    assertQ8Of(c, act, T, I, 'silu_mul\'s q8');
  });

  test('blocks reordered on the device (gguf_split_blocks) equal ggufDeviceLayout\'s bodies and scales, parts joined', () => {
    const c = cuda();
    for (const type of TYPES) {
      const { parts } = partsOf([[type, 3], [type, 5]], 512, 11);
      const w = c.uploadGguf('w', parts) as GgufWeight;
      assert.equal(w.segments.length, 1);
      const seg = w.segments[0]!;
      const host = parts.map((p) => ggufDeviceLayout(p.type, p.data, p.shape[0], 512));
      const join = (arrays: Uint8Array[]): Uint8Array => {
        const out = new Uint8Array(arrays.reduce((n, a) => n + a.byteLength, 0));
        let at = 0;
        for (const a of arrays) { out.set(a, at); at += a.byteLength; }
        return out;
      };
      const body = join(host.map((l) => l.body));
      assert.deepEqual(readDevice(c, seg.body, body.byteLength), body, `${type} bodies`);
      if (host[0]!.scales === null) assert.equal(seg.scales, 0n, `${type}: no scales array`);
      else {
        const scales = join(host.map((l) => l.scales!));
        assert.deepEqual(readDevice(c, seg.scales, scales.byteLength), scales, `${type} scales`);
      }
    }
  });

  test('an op other than matmul refuses a GGUF weight, naming it', () => {
    const c = cuda();
    const w = c.uploadGguf('w', partsOf([['Q8_0', 16]], 256, 2).parts);
    begin(c);
    assert.throws(() => c.rmsNorm(w, c.fromHost([256], randomBf16(256, 1)), 1e-6), /GGUF-quantized weight/);
  });
});
