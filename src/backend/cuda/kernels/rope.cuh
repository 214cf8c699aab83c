// One head's RMSNorm (optional, Qwen3 q_norm / k_norm) and rotary embedding (neox half-split), by one
// warp: the arithmetic of rope.cu's qk_norm_rope, which runs it a head a warp, and of attention_decode.cu's
// fused prologue (a decode step's q heads, and the new token's k and v into the cache), so the two give the
// same bits.
//
//   each head: | x1 = [0, D/2) | x2 = [D/2, D) |
//   angle_i = position * invFreq[i];  x1' = x1 cos - x2 sin;  x2' = x2 cos + x1 sin
//
// Lane l holds the pairs i = l + 32 k. The head's sum of squares is one 32-lane butterfly per k, those summed as
// the butterfly of a block of D/2 threads sums its warps, and every rounding is spelled out: the bits are those of
// one thread per pair, whatever kernel inlines this.
#pragma once
#include "common.cuh"

#define ROPE_MAX_PAIRS 4

/** cos and sin of position * invFreq, in double, rounded to float. */
__device__ __forceinline__ void rope_angle(int position, float invFreq, float& c, float& s) {
  double sd, cd;
  sincos((double)position * (double)invFreq, &sd, &cd);
  c = (float)cd;
  s = (float)sd;
}

/** What rope_head reads besides the head, read ahead (rope_consts): norm weights and angles of lane's pairs. */
struct RopeConsts {
  float w1[ROPE_MAX_PAIRS], w2[ROPE_MAX_PAIRS], c[ROPE_MAX_PAIRS], s[ROPE_MAX_PAIRS];
};

/** rope_head's reads of normW (null: none) and of the angles, for a caller to make before its head is ready. */
template <typename T>
__device__ __forceinline__ void rope_consts(const T* normW, const float* cosRow, const float* sinRow, int headDim,
                                            RopeConsts& rc) {
  const int lane = threadIdx.x & 31;
  const int half = headDim >> 1;
  const int pairs = half >> 5;
#pragma unroll
  for (int k = 0; k < ROPE_MAX_PAIRS; k++) {
    if (k >= pairs) continue;
    const int i = lane + 32 * k;
    if (normW != nullptr) {
      rc.w1[k] = to_float(normW[i]);
      rc.w2[k] = to_float(normW[i + half]);
    }
    rc.c[k] = cosRow[i];
    rc.s[k] = sinRow[i];
  }
}

/**
 * Head x [headDim] normed by normW (null: no norm) and roped by cosRow / sinRow [headDim / 2] into y (null: not
 * stored); with kDst non-null the roped head also goes to kDst and v [headDim] to vDst (a paged cache slot of
 * element type C: an FP8 cache stores the bf16 values rounded once more, to_cache). D/2 a multiple of 32, D <= 256;
 * y may be x. rc: normW's and the angles' values as rope_consts read them, or null (read here).
 */
template <typename T, typename C = T>
__device__ __forceinline__ void rope_head(const T* x, T* y, const T* normW, const float* cosRow, const float* sinRow,
                                          int headDim, float eps, C* kDst, C* vDst, const T* v,
                                          const RopeConsts* rc = nullptr) {
  const int lane = threadIdx.x & 31;
  const int half = headDim >> 1;
  const int pairs = half >> 5;  // per lane
  float x1[ROPE_MAX_PAIRS], x2[ROPE_MAX_PAIRS];
#pragma unroll
  for (int k = 0; k < ROPE_MAX_PAIRS; k++) {
    x1[k] = k < pairs ? to_float(x[lane + 32 * k]) : 0.f;
    x2[k] = k < pairs ? to_float(x[lane + 32 * k + half]) : 0.f;
  }
  if (normW != nullptr) {
    float p[ROPE_MAX_PAIRS];
#pragma unroll
    for (int k = 0; k < ROPE_MAX_PAIRS; k++) {
      p[k] = k < pairs ? warp_sum(__fmaf_rn(x1[k], x1[k], __fmul_rn(x2[k], x2[k]))) : 0.f;
    }
    // block_sum's second butterfly over the warps' partials [p0 .. p_{pairs-1}, 0 ..]: p[j] + p[j + o]
#pragma unroll
    for (int o = ROPE_MAX_PAIRS / 2; o >= 1; o >>= 1) {
#pragma unroll
      for (int j = 0; j < o; j++) if (o < pairs) p[j] = __fadd_rn(p[j], p[j + o]);
    }
    const float inv = rsqrtf(__fadd_rn(__fdiv_rn(p[0], (float)headDim), eps));
#pragma unroll
    for (int k = 0; k < ROPE_MAX_PAIRS; k++) {
      if (k < pairs) {
        x1[k] = __fmul_rn(__fmul_rn(x1[k], inv), rc ? rc->w1[k] : to_float(normW[lane + 32 * k]));
        x2[k] = __fmul_rn(__fmul_rn(x2[k], inv), rc ? rc->w2[k] : to_float(normW[lane + 32 * k + half]));
      }
    }
  }
#pragma unroll
  for (int k = 0; k < ROPE_MAX_PAIRS; k++) {
    if (k >= pairs) continue;
    const int i = lane + 32 * k;
    const float sf = rc ? rc->s[k] : sinRow[i], cf = rc ? rc->c[k] : cosRow[i];
    const T y1 = from_float<T>(__fsub_rn(__fmul_rn(x1[k], cf), __fmul_rn(x2[k], sf)));
    const T y2 = from_float<T>(__fmaf_rn(x1[k], sf, __fmul_rn(x2[k], cf)));
    if (y != nullptr) {
      y[i] = y1;
      y[i + half] = y2;
    }
    if (kDst != nullptr) {
      kDst[i] = to_cache<C>(y1);
      kDst[i + half] = to_cache<C>(y2);
      vDst[i] = to_cache<C>(v[i]);
      vDst[i + half] = to_cache<C>(v[i + half]);
    }
  }
}
