// Block-FP8 linear layers on CUDA (uploadFp8Block, then matmul: kernels/quant_fp8.cu quantizes the activations per
// token and 128 columns; the chain kernel's _fp8 build sums up to 8 tokens, cuBLASLt's block-scaled FP8 GEMM more):
// against the reference fp8BlockMatmul
// (src/model/fp8-linear.ts) on the same e4m3 weights and scales, at step sizes from one token to a prompt chunk (cuBLASLt
// takes multiples of 4 tokens: the others run padded). cuBLASLt sums in its own order and rounds to bf16 once, so
// within bf16 tolerance. (The model test runs the same layers in captured graphs.)

import { after, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { CudaBackend, CudaTensor } from '../../src/backend/cuda/cuda-backend.js';
import type { WeightSource } from '../../src/loader/types.js';
import { bf16ToF32, f32ToBf16, f32ToBytes } from '../../src/loader/dtype.js';
import { e4m3Bits } from '../../src/loader/fp8.js';
import { fp8BlockMatmul, quantizeWeightBlocks } from '../../src/backend/fp8-linear.js';
import type { Fp8BlockPart } from '../../src/backend/backend.js';
import { assertBf16Close, beginPoisonedStep as begin, newCuda, noCuda, randomBf16, readDevice } from './cuda-helpers.js';

const CUDA_OPTIONS = { initialWorkspaceBytes: 16 << 20 };


/** A projection's checkpoint tensors from real weights w [n, K]. */
function partOf(name: string, w: Float32Array, n: number, K: number): { part: Fp8BlockPart; q: Float32Array; s: Float32Array } {
  const { q, scaleInv } = quantizeWeightBlocks(w, n, K);
  const bytes = Uint8Array.from(q, e4m3Bits);
  return {
    part: {
      weight: { name: `${name}.weight`, dtype: 'f8_e4m3', shape: [n, K], data: bytes },
      scaleInv: { name: `${name}.weight_scale_inv`, dtype: 'f32', shape: [n / 128, K / 128], data: new Uint8Array(scaleInv.buffer) },
    },
    q, s: scaleInv,
  };
}

describe('CUDA block-FP8 linear layers', { skip: noCuda || (newCudaArch() < 90 && 'block-FP8 needs sm_90') }, () => {
  const cuda = noCuda ? null : newCuda(CUDA_OPTIONS);
  after(() => cuda?.dispose());

  // qwen3-0.6b's qkv (three parts, concatenated as the loader does) and down, a small square one, an odd count of k
  // groups; and a narrow one of K 8,192, whose chain splits its k between two warps (_s2)
  for (const [sizes, K] of [[[2048, 1024, 1024], 1024], [[1024], 3072], [[256], 256], [[1024], 384], [[256], 8192]] as const) {
    const N = sizes.reduce((a, b) => a + b, 0);
    test(`N ${N} (${sizes.length} parts) K ${K}: matmul equals fp8BlockMatmul within bf16 tolerance`, () => {
      const c = cuda!;
      const parts = sizes.map((n, i) => partOf(`p${i}`, randomBf16(n * K, 10 + i + K, -0.08, 0.08), n, K));
      const w = c.uploadFp8Block('w', parts.map((p) => p.part));
      assert.deepEqual(w.shape, [N, K]);
      const wq = new Float32Array(N * K);
      const ws = new Float32Array(N * K / 128 / 128);
      let row = 0;
      for (const p of parts) {
        wq.set(p.q, row * K);
        ws.set(p.s, row / 128 * (K / 128));
        row += p.q.length / K;
      }
      for (const T of [1, 3, 8, 64, 300]) {
        const x = randomBf16(T * K, T + K, -3, 3);
        for (let k = 0; k < K; k += 97) x[k] = 0;  // zeros, and one whole group of zeros (its scale is eps's)
        x.fill(0, K - 128, K);
        begin(c);
        const chains = c.numChainGemms;
        const xt = c.fromHost([T, K], x);
        const expected = fp8BlockMatmul(x, T, K, wq, ws, N);
        assertBf16Close(c.toHost(c.matmul(xt, w, 'test')), expected, `T ${T}`);
        assert.equal(c.numChainGemms - chains, T <= 8 ? 1 : 0, 'up to 8 tokens on the chain kernel');
        if (T > 8) continue;
        const chained = new CudaBackend({ ...CUDA_OPTIONS, chainGemms: false });
        try {
          // cuBLASLt on the same tokens: the two sum in other orders, so they agree to bf16's rounding
          const w2 = chained.uploadFp8Block('w', parts.map((p) => p.part));
          begin(chained);
          assertBf16Close(chained.toHost(chained.matmul(chained.fromHost([T, K], x), w2, 'test')), expected, `cuBLASLt T ${T}`);
        } finally {
          chained.dispose();
        }
      }
    });
  }

  test('gate_up + silu_mul on block-FP8 weights: the chain kernel\'s fused build, the chain then silu_mul, cuBLASLt then silu_mul', () => {
    const [I, K] = [1024, 1024];
    const gate = partOf('gate', randomBf16(I * K, 21, -0.08, 0.08), I, K);
    const up = partOf('up', randomBf16(I * K, 22, -0.08, 0.08), I, K);
    const bf16 = (v: number) => bf16ToF32(f32ToBf16(Float32Array.of(v)))[0]!;
    // the default fuses 8 rows of gate and their up rows a warp (gemm-chain.ts); QUIRE_CHAIN_SILU_FP8=none does not
    process.env.QUIRE_CHAIN_SILU_FP8 = 'none';
    const unfused = new CudaBackend(CUDA_OPTIONS);
    delete process.env.QUIRE_CHAIN_SILU_FP8;
    try {
      for (const c of [cuda!, unfused]) {
        const w = c.uploadFp8Block('gate_up', [gate.part, up.part]);
        for (const T of [1, 5, 8, 40]) {
          const x = randomBf16(T * K, 30 + T, -3, 3);
          const g = fp8BlockMatmul(x, T, K, gate.q, gate.s, I);
          const u = fp8BlockMatmul(x, T, K, up.q, up.s, I);
          const expected = g.map((gv, i) => {
            const gb = bf16(gv);
            return gb / (1 + Math.exp(-gb)) * bf16(u[i]!);
          });
          begin(c);
          const chains = c.numChainGemms;
          const what = `${c === cuda ? 'pairs' : 'none'}, T ${T}`;
          assertBf16Close(c.toHost(c.matmulSiluMul(c.fromHost([T, K], x), w)), expected, what, 3e-2);
          assert.equal(c.numChainGemms - chains, T <= 8 ? 1 : 0, `${what}: up to 8 tokens on a chain kernel`);
        }
      }
    } finally {
      unfused.dispose();
    }
  });


  test('quantizeFp8Block (--quantization fp8) gives quantizeWeightBlocks\' bytes and scales, streamed or not', () => {
    const c = cuda!;
    const K = 384;  // 3 scale columns: the device's rows pad to 4
    const parts = [256, 128].map((n, i) => ({ name: `p${i}.weight`, n, values: randomBf16(n * K, 40 + i, -0.3, 0.3) }));
    parts[1]!.values.fill(0, 0, K * 128);  // an all-zero block: eps's scale
    const tensors = new Map(parts.map((p) => [p.name, { name: p.name, dtype: 'bf16' as const, shape: [p.n, K],
      data: f32ToBytes('bf16', p.values) }]));
    const source = (streamed: boolean): WeightSource => ({
      names: () => [...tensors.keys()],
      has: (n) => tensors.has(n),
      info: (n) => ({ dtype: 'bf16', shape: tensors.get(n)!.shape, file: 'memory' }),
      read: (n) => tensors.get(n)!,
      readInto: streamed ? (n, offset, dest) => dest.set(tensors.get(n)!.data.subarray(offset, offset + dest.length)) : undefined,
    });
    for (const streamed of [true, false]) {
      const w = c.quantizeFp8Block('w', source(streamed), [...tensors.keys()]) as CudaTensor;
      const bytes = readDevice(c, w.ptr, 384 * K);
      const scales = new Float32Array(readDevice(c, w.scales, 3 * 4 * 4).buffer);
      let row = 0;
      for (const p of parts) {
        const { q, scaleInv } = quantizeWeightBlocks(p.values, p.n, K);
        assert.deepEqual(bytes.subarray(row * K, (row + p.n) * K), Uint8Array.from(q, e4m3Bits), `${p.name} bytes`);
        for (let r = 0; r < p.n / 128; r++) {
          assert.deepEqual([...scales.subarray((row / 128 + r) * 4, (row / 128 + r) * 4 + 3)], [...scaleInv.subarray(r * 3, r * 3 + 3)],
            `${p.name} scales, row block ${r}`);
        }
        row += p.n;
      }
    }
  });

  test('refuses a part whose rows are not a multiple of 128, naming it', () => {
    const c = cuda!;
    const { part } = partOf('bad', randomBf16(128 * 256, 5), 128, 256);
    const short = { ...part, weight: { ...part.weight, shape: [64, 256], data: part.weight.data.slice(0, 64 * 256) } };
    assert.throws(() => c.uploadFp8Block('model.layers.0.self_attn.qkv_proj.weight', [short]), /bad\.weight f8_e4m3 \[64, 256\]/);
  });
});

function newCudaArch(): number {
  if (noCuda) return 0;
  const c = newCuda();
  try {
    return c.device.arch;
  } finally {
    c.dispose();
  }
}
