// One head's RMSNorm (optional, Qwen3 q_norm / k_norm) and rotary embedding (neox half-split), by one
// warp: the arithmetic of rope.cu's qk_norm_rope, which runs it a head a warp, and of attention_decode.cu's
// fused prologue (a decode step's q heads, and the new token's k and v into the cache), so the two give the
// same bits.
//
//   each head: | x1 = [0, rh) | x2 = [rh, 2 rh) | pass-through [2 rh, D) |    rh = rotary pairs (D/2: whole head)
//   angle_i = position * invFreq[i];  x1' = x1 cos - x2 sin;  x2' = x2 cos + x1 sin
//
// Pair p in [0, D/2) is the elements (e1, e2) = p < rh ? (p, p + rh) : (rh + p, D/2 + p): the rotated pairs, then
// the pass-through channels two a pair, every element once; rh = D/2 gives (p, p + D/2). A pass-through pair's
// angle is 0 (the caller's invFreq holds zeros past rh): cos 1 and sin 0 exactly, so x1' = x1 - x2 * 0 = x1 and
// x2' = x1 * 0 + x2 = x2: a pass-through channel keeps its value (after the norm, over all D channels, if any), as
// in the CPU backend, then rounds to T once.
//
// Lane l holds the pairs p = l + 32 k. The head's sum of squares is one 32-lane butterfly per k, those summed as
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

/** Pair p's first element (see the header): p among the rotated pairs, else a pass-through channel. */
__device__ __forceinline__ int rope_e1(int p, int rotPairs) { return p + (p < rotPairs ? 0 : rotPairs); }

/** Pair p's second element: p + rh among the rotated pairs, else the pass-through channel D/2 + p. */
__device__ __forceinline__ int rope_e2(int p, int rotPairs, int half) { return p + (p < rotPairs ? rotPairs : half); }

/** What rope_head reads besides the head, read ahead (rope_consts): norm weights and angles of lane's pairs. */
struct RopeConsts {
  float w1[ROPE_MAX_PAIRS], w2[ROPE_MAX_PAIRS], c[ROPE_MAX_PAIRS], s[ROPE_MAX_PAIRS];
};

/** rope_head's reads of normW (null: none) and of the angles, for a caller to make before its head is ready. */
template <typename T>
__device__ __forceinline__ void rope_consts(const T* normW, const float* cosRow, const float* sinRow, int headDim,
                                            int rotPairs, RopeConsts& rc) {
  const int lane = threadIdx.x & 31;
  const int half = headDim >> 1;
  const int pairs = half >> 5;
#pragma unroll
  for (int k = 0; k < ROPE_MAX_PAIRS; k++) {
    if (k >= pairs) continue;
    const int i = lane + 32 * k;
    if (normW != nullptr) {
      rc.w1[k] = to_float(normW[rope_e1(i, rotPairs)]);
      rc.w2[k] = to_float(normW[rope_e2(i, rotPairs, half)]);
    }
    rc.c[k] = cosRow[i];
    rc.s[k] = sinRow[i];
  }
}

/**
 * Head x [headDim] normed by normW (null: no norm) and its first 2 rotPairs channels roped by cosRow / sinRow
 * [headDim / 2] (cos 1, sin 0 from rotPairs on) into y (null: not stored); with kDst non-null the roped head also
 * goes to kDst and v [headDim] to vDst (a paged cache slot of element type C: an FP8 cache stores the bf16 values
 * rounded once more, to_cache). D/2 a multiple of 32, D <= 256, 0 < rotPairs <= D/2; y may be x. rc: normW's and
 * the angles' values as rope_consts read them, or null (read here).
 */
template <typename T, typename C = T>
__device__ __forceinline__ void rope_head(const T* x, T* y, const T* normW, const float* cosRow, const float* sinRow,
                                          int headDim, int rotPairs, float eps, C* kDst, C* vDst, const T* v,
                                          const RopeConsts* rc = nullptr) {
  const int lane = threadIdx.x & 31;
  const int half = headDim >> 1;
  const int pairs = half >> 5;  // per lane
  // the pairs' elements are recomputed where used (a few integer ops): kept in arrays, they took a stack frame in the
  // decode kernel, whose prologue holds its first round of K and V in registers meanwhile
  float x1[ROPE_MAX_PAIRS], x2[ROPE_MAX_PAIRS];
#pragma unroll
  for (int k = 0; k < ROPE_MAX_PAIRS; k++) {
    x1[k] = k < pairs ? to_float(x[rope_e1(lane + 32 * k, rotPairs)]) : 0.f;
    x2[k] = k < pairs ? to_float(x[rope_e2(lane + 32 * k, rotPairs, half)]) : 0.f;
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
        const int i = lane + 32 * k;
        x1[k] = __fmul_rn(__fmul_rn(x1[k], inv), rc ? rc->w1[k] : to_float(normW[rope_e1(i, rotPairs)]));
        x2[k] = __fmul_rn(__fmul_rn(x2[k], inv), rc ? rc->w2[k] : to_float(normW[rope_e2(i, rotPairs, half)]));
      }
    }
  }
#pragma unroll
  for (int k = 0; k < ROPE_MAX_PAIRS; k++) {
    if (k >= pairs) continue;
    const int i = lane + 32 * k, e1 = rope_e1(i, rotPairs), e2 = rope_e2(i, rotPairs, half);
    const float sf = rc ? rc->s[k] : sinRow[i], cf = rc ? rc->c[k] : cosRow[i];
    const T y1 = from_float<T>(__fsub_rn(__fmul_rn(x1[k], cf), __fmul_rn(x2[k], sf)));
    const T y2 = from_float<T>(__fmaf_rn(x1[k], sf, __fmul_rn(x2[k], cf)));
    if (y != nullptr) {
      y[e1] = y1;
      y[e2] = y2;
    }
    if (kDst != nullptr) {
      kDst[e1] = to_cache<C>(y1);
      kDst[e2] = to_cache<C>(y2);
      vDst[e1] = to_cache<C>(v[e1]);
      vDst[e2] = to_cache<C>(v[e2]);
    }
  }
}
