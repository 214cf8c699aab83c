// GGML tensor types -> f32, as ggml's dequantize_row_* compute them (ggml-quants.c; block layouts of ggml-common.h).
// Hand-written: no maintained JS library dequantizes GGML blocks (@huggingface/gguf parses headers only). Each product
// is rounded to f32 where ggml's C rounds it (Math.fround), so the values are ggml's, not a double-precision variant.

import { f16BitsToF32 } from './dtype.js';

/** GGML type ids (ggml.h's enum ggml_type) Quire reads, with their block sizes. */
export const GGML_TYPES = {
  F32: { id: 0, blockElems: 1, blockBytes: 4 },
  F16: { id: 1, blockElems: 1, blockBytes: 2 },
  Q4_0: { id: 2, blockElems: 32, blockBytes: 18 },
  Q8_0: { id: 8, blockElems: 32, blockBytes: 34 },
  Q4_K: { id: 12, blockElems: 256, blockBytes: 144 },
  Q5_K: { id: 13, blockElems: 256, blockBytes: 176 },
  Q6_K: { id: 14, blockElems: 256, blockBytes: 210 },
  BF16: { id: 30, blockElems: 1, blockBytes: 2 },
} as const;

export type GgmlTypeName = keyof typeof GGML_TYPES;

const BY_ID = new Map<number, GgmlTypeName>(Object.entries(GGML_TYPES).map(([k, v]) => [v.id, k as GgmlTypeName]));

/** The name of a supported GGML type id, or undefined. */
export function ggmlTypeName(id: number): GgmlTypeName | undefined {
  return BY_ID.get(id);
}

/** Bytes of `numElements` elements of `type` (whole blocks: numElements must be a multiple of its block). */
export function ggmlBytes(type: GgmlTypeName, numElements: number): number {
  const t = GGML_TYPES[type];
  return (numElements / t.blockElems) * t.blockBytes;
}

const fr = Math.fround;
const half = (b: Uint8Array, o: number): number => f16BitsToF32(b[o]! | (b[o + 1]! << 8));

/** Q4_K and Q5_K's 6-bit scale and min of sub-block j from the 12 packed bytes at s (get_scale_min_k4). */
function scaleMinK4(j: number, b: Uint8Array, s: number): [number, number] {
  if (j < 4) return [b[s + j]! & 63, b[s + j + 4]! & 63];
  return [(b[s + j + 4]! & 0xf) | ((b[s + j - 4]! >> 6) << 4), (b[s + j + 4]! >> 4) | ((b[s + j]! >> 6) << 4)];
}

function q8_0(src: Uint8Array, out: Float32Array, blocks: number): void {
  for (let i = 0; i < blocks; i++) {
    const o = i * 34;
    const d = half(src, o);
    for (let j = 0; j < 32; j++) out[i * 32 + j] = fr(((src[o + 2 + j]! << 24) >> 24) * d);
  }
}

function q4_0(src: Uint8Array, out: Float32Array, blocks: number): void {
  for (let i = 0; i < blocks; i++) {
    const o = i * 18;
    const d = half(src, o);
    for (let j = 0; j < 16; j++) {
      const q = src[o + 2 + j]!;
      out[i * 32 + j] = fr(((q & 0xf) - 8) * d);
      out[i * 32 + j + 16] = fr(((q >> 4) - 8) * d);
    }
  }
}

// block_q4_K: d (f16), dmin (f16), scales[12], qs[128]; block_q5_K adds qh[32] before qs.
function qK(src: Uint8Array, out: Float32Array, blocks: number, five: boolean): void {
  const size = five ? 176 : 144;
  for (let i = 0; i < blocks; i++) {
    const o = i * size;
    const d = half(src, o);
    const min = half(src, o + 2);
    const qh = o + 16;
    let q = five ? o + 48 : o + 16;
    let y = i * 256;
    let u1 = 1;
    let u2 = 2;
    for (let j = 0, is = 0; j < 256; j += 64, is += 2) {
      const [sc1, m1q] = scaleMinK4(is, src, o + 4);
      const [sc2, m2q] = scaleMinK4(is + 1, src, o + 4);
      const d1 = fr(d * sc1), m1 = fr(min * m1q), d2 = fr(d * sc2), m2 = fr(min * m2q);
      for (let l = 0; l < 32; l++) {
        const hi = five && (src[qh + l]! & u1) ? 16 : 0;
        out[y++] = fr(fr(d1 * ((src[q + l]! & 0xf) + hi)) - m1);
      }
      for (let l = 0; l < 32; l++) {
        const hi = five && (src[qh + l]! & u2) ? 16 : 0;
        out[y++] = fr(fr(d2 * ((src[q + l]! >> 4) + hi)) - m2);
      }
      q += 32;
      u1 <<= 2;
      u2 <<= 2;
    }
  }
}

// block_q6_K: ql[128], qh[64], scales[16] (int8), d (f16)
function q6K(src: Uint8Array, out: Float32Array, blocks: number): void {
  for (let i = 0; i < blocks; i++) {
    const o = i * 210;
    const d = half(src, o + 208);
    for (let n = 0; n < 2; n++) {
      const ql = o + n * 64, qh = o + 128 + n * 32, sc = o + 192 + n * 8, y = i * 256 + n * 128;
      const scale = (k: number): number => fr(d * ((src[sc + k]! << 24) >> 24));
      for (let l = 0; l < 32; l++) {
        const is = l >> 4, h = src[qh + l]!;
        const q1 = ((src[ql + l]! & 0xf) | ((h & 3) << 4)) - 32;
        const q2 = ((src[ql + l + 32]! & 0xf) | (((h >> 2) & 3) << 4)) - 32;
        const q3 = ((src[ql + l]! >> 4) | (((h >> 4) & 3) << 4)) - 32;
        const q4 = ((src[ql + l + 32]! >> 4) | (((h >> 6) & 3) << 4)) - 32;
        out[y + l] = fr(scale(is) * q1);
        out[y + l + 32] = fr(scale(is + 2) * q2);
        out[y + l + 64] = fr(scale(is + 4) * q3);
        out[y + l + 96] = fr(scale(is + 6) * q4);
      }
    }
  }
}

/** `numElements` values of `type` stored in src (little-endian blocks) as f32. */
export function dequantize(type: GgmlTypeName, src: Uint8Array, numElements: number): Float32Array {
  const out = new Float32Array(numElements);
  const blocks = numElements / GGML_TYPES[type].blockElems;
  switch (type) {
    case 'F32':
      new Uint8Array(out.buffer).set(src.subarray(0, numElements * 4));
      break;
    case 'F16':
      for (let i = 0; i < numElements; i++) out[i] = f16BitsToF32(src[2 * i]! | (src[2 * i + 1]! << 8));
      break;
    case 'BF16': {
      const u = new Uint32Array(out.buffer);
      for (let i = 0; i < numElements; i++) u[i] = ((src[2 * i]! | (src[2 * i + 1]! << 8)) << 16) >>> 0;
      break;
    }
    case 'Q8_0': q8_0(src, out, blocks); break;
    case 'Q4_0': q4_0(src, out, blocks); break;
    case 'Q4_K': qK(src, out, blocks, false); break;
    case 'Q5_K': qK(src, out, blocks, true); break;
    case 'Q6_K': q6K(src, out, blocks); break;
  }
  return out;
}
