// Fused per-head RMSNorm (optional, Qwen3 q_norm / k_norm) and rotary embedding
// (neox half-split), in place on the q and k heads of the fused qkv buffer.
//
//   qkv row t: | q head 0 .. numHeads-1 | k head 0 .. numKvHeads-1 | v heads (untouched) |
//   each head: | x1 = [0, D/2) | x2 = [D/2, D) |
//   angle_i = positions[t] * invFreq[i];  x1' = x1 cos - x2 sin;  x2' = x2 cos + x1 sin
//
// With kCache non-null, the k heads also write the roped k and the v head into the paged cache at
// slotMapping[t] (as kv_write.cu does: [numBlocks, blockSize, numKvHeads, D], slot < 0 not written).
//
// Block (t, y) serves heads y ROPE_WARPS .. y ROPE_WARPS + ROPE_WARPS - 1 of token t, a warp each, and
// lane l holds the pairs i = l + 32 k. The angles' cos and sin (in double, as the CPU backend does, rounded
// to float) come from the step's table (rope_table: once per step, not once per block and layer, whose
// double sincos was most of a block's time), or, without one (decode_layers.cu), are computed by the block
// into shared memory. The head's sum of squares is one 32-lane butterfly per k, those summed as the
// butterfly of a block of D/2 threads sums its warps, and every rounding is spelled out: the bits are those
// of one thread per pair.
//
// Shapes: qkv [numTokens, (numHeads + 2 numKvHeads) D]; qNorm, kNorm [D]; invFreq [D/2];
//   ropeTable [numTokens, 2, D/2] f32 (cos, then sin) or null.
// Launch: grid (numTokens, ceil((numHeads + numKvHeads) / ROPE_WARPS)), block ROPE_WARPS * 32;
//   D/2 a multiple of 32, D <= 256. rope_table: grid ceil(numTokens D/2 / 256), block 256.
#include "common.cuh"

#define ROPE_WARPS 4
#define ROPE_MAX_PAIRS 4

/** cos and sin of position * invFreq, in double, rounded to float. */
__device__ __forceinline__ void rope_angle(int position, float invFreq, float& c, float& s) {
  double sd, cd;
  sincos((double)position * (double)invFreq, &sd, &cd);
  c = (float)cd;
  s = (float)sd;
}

template <typename T>
__device__ __forceinline__ void qk_norm_rope(T* qkv, const T* qNorm, const T* kNorm, int applyNorm,
                                             const float* invFreq, const int* positions, T* kCache, T* vCache,
                                             const int* slotMapping, int numHeads, int numKvHeads, int headDim,
                                             float eps, int t, int headBlock, const float* ropeTable = nullptr) {
  __shared__ float cosOf[ROPE_MAX_PAIRS * 32], sinOf[ROPE_MAX_PAIRS * 32];
  const int half = headDim >> 1;
  const int pairs = half >> 5;  // per lane
  const float* cosRow = ropeTable + (long long)t * headDim;
  if (ropeTable == nullptr) {
    for (int i = threadIdx.x; i < half; i += blockDim.x) rope_angle(positions[t], invFreq[i], cosOf[i], sinOf[i]);
    __syncthreads();
    cosRow = cosOf;
  }
  const float* sinRow = ropeTable == nullptr ? sinOf : cosRow + half;
  const int lane = threadIdx.x & 31;
  const int head = headBlock * ROPE_WARPS + (threadIdx.x >> 5);
  if (head >= numHeads + numKvHeads) return;
  T* x = qkv + (long long)t * (numHeads + 2 * numKvHeads) * headDim + (long long)head * headDim;
  float x1[ROPE_MAX_PAIRS], x2[ROPE_MAX_PAIRS];
#pragma unroll
  for (int k = 0; k < ROPE_MAX_PAIRS; k++) {
    x1[k] = k < pairs ? to_float(x[lane + 32 * k]) : 0.f;
    x2[k] = k < pairs ? to_float(x[lane + 32 * k + half]) : 0.f;
  }
  if (applyNorm) {
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
    const T* w = head < numHeads ? qNorm : kNorm;
#pragma unroll
    for (int k = 0; k < ROPE_MAX_PAIRS; k++) {
      if (k < pairs) {
        x1[k] = __fmul_rn(__fmul_rn(x1[k], inv), to_float(w[lane + 32 * k]));
        x2[k] = __fmul_rn(__fmul_rn(x2[k], inv), to_float(w[lane + 32 * k + half]));
      }
    }
  }
  const long long slot = kCache != nullptr && head >= numHeads ? (long long)slotMapping[t] : -1;
  const long long at = (slot * numKvHeads + (head - numHeads)) * headDim;
#pragma unroll
  for (int k = 0; k < ROPE_MAX_PAIRS; k++) {
    if (k >= pairs) continue;
    const int i = lane + 32 * k;
    const float sf = sinRow[i], cf = cosRow[i];
    const T y1 = from_float<T>(__fsub_rn(__fmul_rn(x1[k], cf), __fmul_rn(x2[k], sf)));
    const T y2 = from_float<T>(__fmaf_rn(x1[k], sf, __fmul_rn(x2[k], cf)));
    x[i] = y1;
    x[i + half] = y2;
    if (slot >= 0) {
      const T* v = x + (long long)numKvHeads * headDim;
      kCache[at + i] = y1;
      kCache[at + i + half] = y2;
      vCache[at + i] = v[i];
      vCache[at + i + half] = v[i + half];
    }
  }
}

#ifndef QUIRE_DEVICE_ONLY  // kernels/decode_layers.cu includes the device function alone
#define INSTANTIATE(suffix, T)                                                                                  \
  extern "C" __global__ void qk_norm_rope_##suffix(T* qkv, const T* qNorm, const T* kNorm, int applyNorm,      \
                                                   const float* invFreq, const int* positions, T* kCache,      \
                                                   T* vCache, const int* slotMapping, int numHeads,            \
                                                   int numKvHeads, int headDim, float eps,                     \
                                                   const float* ropeTable) {                                   \
    pdl_begin();                                                                                               \
    qk_norm_rope<T>(qkv, qNorm, kNorm, applyNorm, invFreq, positions, kCache, vCache, slotMapping, numHeads,   \
                    numKvHeads, headDim, eps, blockIdx.x, blockIdx.y, ropeTable);                              \
  }

INSTANTIATE(bf16, bf16_t)
INSTANTIATE(f32, float)
#undef INSTANTIATE

/** table[t] = cos, then sin, of positions[t] * invFreq[i] for i < half (see rope_angle). */
extern "C" __global__ void rope_table(const float* invFreq, const int* positions, float* table, int numTokens,
                                      int half) {
  pdl_begin();
  const long long at = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (at >= (long long)numTokens * half) return;
  const int t = (int)(at / half), i = (int)(at % half);
  rope_angle(positions[t], invFreq[i], table[(long long)t * 2 * half + i], table[(long long)t * 2 * half + half + i]);
}
#endif
