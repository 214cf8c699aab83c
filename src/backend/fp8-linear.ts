// Linear layers with FP8 weights in 128 x 128 blocks (the format of Qwen3-*-FP8 and DeepSeek-V3 checkpoints:
// quantization_config {"quant_method": "fp8", "weight_block_size": [128, 128], "activation_scheme": "dynamic"}),
// computed as vLLM computes them (W8A8): each token's activations are quantized to e4m3 in groups of 128 columns
// with a scale of their own, and each 128-column block of the product is the e4m3 dot product times both scales.
//
//   xs[t, kb]  = max(absmax(x[t, 128 kb .. +127]), 1e-10) / 448          (f32)
//   xq[t, k]   = e4m3(x[t, k] / xs[t, k / 128])                             (f32 division, round to nearest even)
//   y[t, n]    = sum over kb of (sum over the block's k of xq[t, k] wq[n, k]) * xs[t, kb] * ws[n / 128, kb]
//
// ws is the checkpoint's `weight_scale_inv` ([ceil(N / 128), ceil(K / 128)], f32: the factor that takes a stored
// e4m3 weight back to its value). This file is the reference: the CPU backend runs it, and the GPU's cuBLASLt
// path (its own order of sums) is tested against it.

import { E4M3_MAX, roundE4m3 } from '../loader/fp8.js';

export const FP8_BLOCK = 128;
/** The smallest absmax a group's scale is computed from (vLLM's eps: an all-zero group gets a tiny scale). */
export const FP8_ACT_EPS = 1e-10;

/** Bytes of a block-FP8 weight [N, K]: its e4m3 values and its f32 block scales. */
export function fp8BlockBytes(N: number, K: number): number {
  return N * K + 4 * Math.ceil(N / FP8_BLOCK) * Math.ceil(K / FP8_BLOCK);
}

/** Per token and 128-column group: the scale and the e4m3 values (as f32) of x [T, K]. */
export function quantizeActivationGroups(x: Float32Array, T: number, K: number): { q: Float32Array; scales: Float32Array } {
  const groups = Math.ceil(K / FP8_BLOCK);
  const q = new Float32Array(T * K);
  const scales = new Float32Array(T * groups);
  for (let t = 0; t < T; t++) {
    for (let g = 0; g < groups; g++) {
      const k0 = g * FP8_BLOCK, k1 = Math.min(K, k0 + FP8_BLOCK);
      let absmax = 0;
      for (let k = k0; k < k1; k++) absmax = Math.max(absmax, Math.abs(x[t * K + k]!));
      const s = Math.fround(Math.max(absmax, FP8_ACT_EPS) / E4M3_MAX);
      scales[t * groups + g] = s;
      for (let k = k0; k < k1; k++) q[t * K + k] = roundE4m3(Math.fround(x[t * K + k]! / s));
    }
  }
  return { q, scales };
}

/**
 * y [T, N] (f32) = x [T, K] times the block-FP8 weight wq [N, K] (e4m3 values as f32) with block scales
 * ws [ceil(N / 128), ceil(K / 128)], as the file's header spells out.
 */
export function fp8BlockMatmul(x: Float32Array, T: number, K: number, wq: Float32Array, ws: Float32Array,
  N: number): Float32Array {
  const groups = Math.ceil(K / FP8_BLOCK);
  const { q, scales } = quantizeActivationGroups(x, T, K);
  const y = new Float32Array(T * N);
  for (let t = 0; t < T; t++) {
    const xRow = t * K;
    for (let n = 0; n < N; n++) {
      const wRow = n * K;
      const sRow = Math.floor(n / FP8_BLOCK) * groups;
      let acc = 0;
      for (let g = 0; g < groups; g++) {
        const k0 = g * FP8_BLOCK, k1 = Math.min(K, k0 + FP8_BLOCK);
        let dot = 0;
        for (let k = k0; k < k1; k++) dot += q[xRow + k]! * wq[wRow + k]!;
        acc += Math.fround(dot) * scales[t * groups + g]! * ws[sRow + g]!;
      }
      y[t * N + n] = acc;
    }
  }
  return y;
}

/** A weight as block FP8 (what the checkpoint stores) from its real values w [N, K]: per 128 x 128 block. */
export function quantizeWeightBlocks(w: Float32Array, N: number, K: number): { q: Float32Array; scaleInv: Float32Array } {
  const rowBlocks = Math.ceil(N / FP8_BLOCK), colBlocks = Math.ceil(K / FP8_BLOCK);
  const q = new Float32Array(N * K);
  const scaleInv = new Float32Array(rowBlocks * colBlocks);
  for (let rb = 0; rb < rowBlocks; rb++) {
    for (let cb = 0; cb < colBlocks; cb++) {
      const n0 = rb * FP8_BLOCK, n1 = Math.min(N, n0 + FP8_BLOCK);
      const k0 = cb * FP8_BLOCK, k1 = Math.min(K, k0 + FP8_BLOCK);
      let absmax = 0;
      for (let n = n0; n < n1; n++) for (let k = k0; k < k1; k++) absmax = Math.max(absmax, Math.abs(w[n * K + k]!));
      const s = Math.fround(Math.max(absmax, FP8_ACT_EPS) / E4M3_MAX);
      scaleInv[rb * colBlocks + cb] = s;
      for (let n = n0; n < n1; n++) for (let k = k0; k < k1; k++) q[n * K + k] = roundE4m3(Math.fround(w[n * K + k]! / s));
    }
  }
  return { q, scaleInv };
}
