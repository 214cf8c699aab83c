// FP8 E4M3 (OCP "e4m3fn": 1 sign, 4 exponent bits of bias 7, 3 mantissa bits; no infinities; +-448 the largest
// finite; S.1111.111 NaN) as vLLM's --kv-cache-dtype fp8 keeps K and V with scale 1: every value rounded to nearest
// even and saturated to +-448, as the GPU's cvt.rn.satfinite.e4m3x2.f32 does.

/** KV cache element types: the compute dtype, or FP8 E4M3. */
export type KvCacheDtype = 'auto' | 'fp8_e4m3';

export const E4M3_MAX = 448;

/** The value of e4m3 code `bits` (0..255); NaN for the two NaN codes. */
export function e4m3Value(bits: number): number {
  const sign = bits & 0x80 ? -1 : 1;
  const exp = (bits >> 3) & 0xf;
  const man = bits & 0x7;
  if (exp === 0xf && man === 0x7) return NaN;
  return sign * (exp === 0 ? man / 8 * 2 ** -6 : (1 + man / 8) * 2 ** (exp - 7));
}

/**
 * The e4m3 code of `value`, which must be an e4m3 value (roundE4m3's results are); NaN gives 0x7f. The inverse of
 * e4m3Value, for writing FP8 tensors.
 */
export function e4m3Bits(value: number): number {
  if (Number.isNaN(value)) return 0x7f;
  const sign = value < 0 || Object.is(value, -0) ? 0x80 : 0;
  const a = Math.abs(value);
  // a in [2^e, 2^(e+1)): exponent field e + 7, mantissa (a / 2^e - 1) * 8; below 2^-6 the subnormals (field 0,
  // mantissa a / 2^-9)
  let e = Math.floor(Math.log2(a));
  if (2 ** e > a) e--;
  else if (2 ** (e + 1) <= a) e++;
  if (a < 2 ** -6) e = -7;
  const mantissa = e === -7 ? a / 2 ** -9 : (a / 2 ** e - 1) * 8;
  if (!Number.isInteger(mantissa) || mantissa > 7 || e > 8 || (e === 8 && mantissa === 7)) {
    throw new RangeError(`e4m3Bits: ${value} is not an e4m3 value (round it with roundE4m3 first)`);
  }
  return sign | ((e + 7) << 3) | mantissa;
}

/** x rounded to the nearest e4m3 value (ties to even), saturated to +-448; NaN stays NaN. */
export function roundE4m3(x: number): number {
  if (Number.isNaN(x)) return NaN;
  const a = Math.abs(x);
  if (a >= E4M3_MAX) return Math.sign(x) * E4M3_MAX;
  if (a === 0) return x;
  // a in [2^e, 2^(e+1)); the values there are 2^(e-3) apart (subnormals, below 2^-6: 2^-9)
  let e = Math.floor(Math.log2(a));
  if (2 ** e > a) e--;
  else if (2 ** (e + 1) <= a) e++;
  const step = 2 ** (Math.max(e, -6) - 3);
  const q = a / step;  // exact: step is a power of two
  const lo = Math.floor(q);
  const n = q - lo > 0.5 || (q - lo === 0.5 && lo % 2 === 1) ? lo + 1 : lo;
  return Math.sign(x) * Math.min(n * step, E4M3_MAX);
}

/** Rounds every value of `a` to e4m3 in place. */
export function roundE4m3Into(a: Float32Array): void {
  for (let i = 0; i < a.length; i++) a[i] = roundE4m3(a[i]!);
}
