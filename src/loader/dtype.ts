import { e4m3Bits, e4m3Value, roundE4m3 } from './fp8.js';
import type { DType } from './types.js';

export const BYTES_PER_ELEMENT: Record<DType, number> = { bf16: 2, f16: 2, f32: 4, f8_e4m3: 1 };

/** safetensors dtype strings <-> ours. */
export const SAFETENSORS_DTYPE: Record<DType, string> = { bf16: 'BF16', f16: 'F16', f32: 'F32', f8_e4m3: 'F8_E4M3' };

export function dtypeFromSafetensors(name: string): DType | null {
  switch (name) {
    case 'BF16':
      return 'bf16';
    case 'F16':
      return 'f16';
    case 'F32':
      return 'f32';
    case 'F8_E4M3':
      return 'f8_e4m3';
    default:
      return null;
  }
}

const scratchF32 = new Float32Array(1);
const scratchU32 = new Uint32Array(scratchF32.buffer);

function f32Bits(x: number): number {
  scratchF32[0] = x;
  return scratchU32[0]!;
}

function f32FromBits(bits: number): number {
  scratchU32[0] = bits >>> 0;
  return scratchF32[0]!;
}

/** One f32 -> bf16 bit pattern, round to nearest even; NaN stays a quiet NaN. */
export function f32ToBf16Bits(x: number): number {
  const bits = f32Bits(x);
  if ((bits & 0x7fffffff) > 0x7f800000) return ((bits >>> 16) | 0x0040) & 0xffff;
  const lsb = (bits >>> 16) & 1;
  return ((bits + 0x7fff + lsb) >>> 16) & 0xffff;
}

export function bf16BitsToF32(h: number): number {
  return f32FromBits((h & 0xffff) << 16);
}

/** One f32 -> f16 bit pattern, round to nearest even, overflow to inf, subnormals kept. */
export function f32ToF16Bits(x: number): number {
  const bits = f32Bits(x);
  const sign = (bits >>> 16) & 0x8000;
  const exp = (bits >>> 23) & 0xff;
  const mant = bits & 0x7fffff;
  if (exp === 0xff) return sign | 0x7c00 | (mant !== 0 ? 0x200 | (mant >>> 13) : 0);
  const e = exp - 127 + 15;
  if (e >= 0x1f) return sign | 0x7c00;
  if (e <= 0) {
    if (e < -10) return sign;
    const full = mant | 0x800000;
    const shift = 14 - e;
    let half = full >>> shift;
    const rem = full & ((1 << shift) - 1);
    const halfway = 1 << (shift - 1);
    if (rem > halfway || (rem === halfway && (half & 1) === 1)) half += 1;
    return sign | half;
  }
  let half = (e << 10) | (mant >>> 13);
  const rem = mant & 0x1fff;
  if (rem > 0x1000 || (rem === 0x1000 && (half & 1) === 1)) half += 1;
  return sign | half;
}

export function f16BitsToF32(h: number): number {
  const sign = h & 0x8000 ? -1 : 1;
  const exp = (h >>> 10) & 0x1f;
  const mant = h & 0x3ff;
  if (exp === 0) return sign * mant * 2 ** -24;
  if (exp === 0x1f) return mant === 0 ? sign * Infinity : NaN;
  return sign * (1 + mant / 1024) * 2 ** (exp - 15);
}

export function f32ToBf16(src: Float32Array): Uint16Array {
  const out = new Uint16Array(src.length);
  for (let i = 0; i < src.length; i++) out[i] = f32ToBf16Bits(src[i]!);
  return out;
}

export function bf16ToF32(src: Uint16Array): Float32Array {
  const out = new Float32Array(src.length);
  const outBits = new Uint32Array(out.buffer);
  for (let i = 0; i < src.length; i++) outBits[i] = src[i]! << 16;
  return out;
}

export function f32ToF16(src: Float32Array): Uint16Array {
  const out = new Uint16Array(src.length);
  for (let i = 0; i < src.length; i++) out[i] = f32ToF16Bits(src[i]!);
  return out;
}

export function f16ToF32(src: Uint16Array): Float32Array {
  const out = new Float32Array(src.length);
  for (let i = 0; i < src.length; i++) out[i] = f16BitsToF32(src[i]!);
  return out;
}

/** The value of every e4m3 code (NaN for the two NaN codes). */
const E4M3_VALUES = Float32Array.from({ length: 256 }, (_, bits) => e4m3Value(bits));

/** e4m3 codes -> their values (NaN codes to NaN). */
export function e4m3ToF32(src: Uint8Array): Float32Array {
  const out = new Float32Array(src.length);
  for (let i = 0; i < src.length; i++) out[i] = E4M3_VALUES[src[i]!]!;
  return out;
}

/** f32 values -> e4m3 codes: rounded to nearest even, saturated to +-448 (as roundE4m3). */
export function f32ToE4m3(src: Float32Array): Uint8Array {
  const out = new Uint8Array(src.length);
  for (let i = 0; i < src.length; i++) out[i] = e4m3Bits(roundE4m3(src[i]!));
  return out;
}

/** Raw little-endian bytes of any supported dtype -> f32 values. */
export function bytesToF32(dtype: DType, data: Uint8Array): Float32Array {
  const numElements = data.byteLength / BYTES_PER_ELEMENT[dtype];
  const aligned = data.byteOffset % 4 === 0 ? data : data.slice();
  switch (dtype) {
    case 'f32':
      return new Float32Array(aligned.buffer, aligned.byteOffset, numElements).slice();
    case 'bf16':
      return bf16ToF32(new Uint16Array(aligned.buffer, aligned.byteOffset, numElements));
    case 'f16':
      return f16ToF32(new Uint16Array(aligned.buffer, aligned.byteOffset, numElements));
    case 'f8_e4m3':
      return e4m3ToF32(data);
  }
}

/** f32 values -> raw little-endian bytes of dtype. */
export function f32ToBytes(dtype: DType, src: Float32Array): Uint8Array {
  switch (dtype) {
    case 'f32':
      return new Uint8Array(src.buffer, src.byteOffset, src.byteLength);
    case 'bf16': {
      const h = f32ToBf16(src);
      return new Uint8Array(h.buffer);
    }
    case 'f16': {
      const h = f32ToF16(src);
      return new Uint8Array(h.buffer);
    }
    case 'f8_e4m3':
      return f32ToE4m3(src);
  }
}
