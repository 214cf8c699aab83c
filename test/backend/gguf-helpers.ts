// GGUF blocks for the tests of the device path: random bytes in every field (every nibble, high bit and 6-bit scale
// occurs), with each f16 scale made finite, so dequantize() gives finite values to compare with.

import { GGML_TYPES } from '../../src/loader/gguf-quants.js';
import type { GgufBlockType } from '../../src/loader/types.js';
import { seededRandom } from '../../src/model/random-weights.js';

/** Byte offsets of a block's f16 fields (d, and Q4_K / Q5_K's dmin). */
const F16_FIELDS: Record<GgufBlockType, number[]> = { Q4_0: [0], Q8_0: [0], Q4_K: [0, 2], Q5_K: [0, 2], Q6_K: [208] };

/**
 * `rows` rows of K values of `type` as GGUF blocks. `maxScale` bounds each f16 field (d, dmin) so the values stay of
 * a weight's size; they may be negative and subnormal.
 */
export function randomGgufBlocks(type: GgufBlockType, rows: number, K: number, seed: number, maxScale = 0.01): Uint8Array {
  const { blockElems, blockBytes } = GGML_TYPES[type];
  const numBlocks = rows * (K / blockElems);
  const rand = seededRandom(seed);
  const data = Uint8Array.from({ length: numBlocks * blockBytes }, () => Math.floor(rand() * 256));
  const view = new DataView(data.buffer);
  for (let b = 0; b < numBlocks; b++) {
    for (const at of F16_FIELDS[type]) {
      // an f16 of magnitude below maxScale: sign, exponent and mantissa random under that bound
      const magnitude = rand() * maxScale;
      const bits = f16Bits(rand() < 0.1 ? magnitude * 1e-4 : magnitude) | (rand() < 0.5 ? 0x8000 : 0);
      view.setUint16(b * blockBytes + at, bits, true);
    }
  }
  return data;
}

/** x (>= 0, below 65504) as f16 bits, truncated. */
function f16Bits(x: number): number {
  if (x < 2 ** -14) return Math.floor(x / 2 ** -24);
  const e = Math.floor(Math.log2(x));
  return ((e + 15) << 10) | Math.min(1023, Math.max(0, Math.floor((x / 2 ** e - 1) * 1024)));
}

/** A step's activations as kernels/gguf_q8.cuh quantizes them: each row's blocks of 32 as int8 q, scale d, sum s. */
export interface Q8Rows {
  q: Int8Array;
  d: Float32Array;
  s: Int32Array;
}

/** x / d rounded to the nearest integer, ties to even (the device's __float2int_rn, the host's nearbyintf). */
function roundHalfEven(v: number): number {
  const f = Math.floor(v);
  const diff = v - f;
  if (diff !== 0.5) return diff < 0.5 ? f : f + 1;
  return f % 2 === 0 ? f : f + 1;
}

/**
 * x (rows of K values, each bf16-exact) as gguf_q8.cuh's rules: d = amax / 127 and q = x / d, each rounded once to
 * f32 (a double quotient of two f32 rounded to f32 is the f32 quotient), q then to the nearest integer.
 */
export function quantizeQ8(x: Float32Array, K: number): Q8Rows {
  if (K % 32 !== 0 || x.length % K !== 0) throw new Error(`quantizeQ8: ${x.length} values in rows of ${K}`);
  const q = new Int8Array(x.length);
  const d = new Float32Array(x.length / 32);
  const s = new Int32Array(x.length / 32);
  for (let b = 0; b < x.length / 32; b++) {
    let amax = 0;
    for (let i = 0; i < 32; i++) amax = Math.max(amax, Math.abs(x[32 * b + i]!));
    const scale = Math.fround(amax / 127);
    let sum = 0;
    for (let i = 0; i < 32; i++) {
      const v = scale === 0 ? 0 : roundHalfEven(Math.fround(x[32 * b + i]! / scale));
      q[32 * b + i] = v;
      sum += v;
    }
    d[b] = scale;
    s[b] = sum;
  }
  return { q, d, s };
}

/**
 * The GGUF GEMV's y[t, n] = sum_k w[n, k] d[t, k / 32] q[t, k] in double, on the weights' dequantized values, and
 * the same sum of magnitudes (the scale of its f32 rounding): the kernel sums the same products in f32, integer
 * parts exact, so it differs from this by float rounding only.
 */
export function q8MatmulReference(w: Float32Array, x: Q8Rows, T: number, N: number, K: number):
  { y: Float64Array; magnitude: Float64Array } {
  const y = new Float64Array(T * N);
  const magnitude = new Float64Array(T * N);
  for (let t = 0; t < T; t++) {
    for (let n = 0; n < N; n++) {
      let sum = 0;
      let mag = 0;
      for (let k = 0; k < K; k++) {
        const p = w[n * K + k]! * x.d[(t * K + k) >> 5]! * x.q[t * K + k]!;
        sum += p;
        mag += Math.abs(p);
      }
      y[t * N + n] = sum;
      magnitude[t * N + n] = mag;
    }
  }
  return { y, magnitude };
}
