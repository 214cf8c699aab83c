// Fused per-head RMSNorm (optional, Qwen3 q_norm / k_norm) and rotary embedding
// (neox half-split), in place on the q and k heads of the fused qkv buffer.
//
//   qkv row t: | q head 0 .. numHeads-1 | k head 0 .. numKvHeads-1 | v heads (untouched) |
//   each head: | x1 = [0, rh) | x2 = [rh, 2 rh) | pass-through [2 rh, D) |   rh = rotPairs (D/2: the whole head)
//   angle_i = positions[t] * invFreq[i];  x1' = x1 cos - x2 sin;  x2' = x2 cos + x1 sin
//
// Partial rotary (Qwen3.5: 64 of 256 channels, rh 32): the norm is over all D channels, the rotation over the first
// 2 rh; invFreq holds zeros from rh to D/2, whose angle 0 leaves the pass-through channels as they are (rope.cuh).
//
// With kCache non-null, the k heads also write the roped k and the v head into the paged cache at
// slotMapping[t] (as kv_write.cu does: [numBlocks, blockSize, numKvHeads, D], slot < 0 not written).
//
// Block (t, y) serves heads y ROPE_WARPS .. y ROPE_WARPS + ROPE_WARPS - 1 of token t, a warp each (rope.cuh's
// rope_head, whose arithmetic attention_decode.cu's fused prologue shares). The angles' cos and sin (in double,
// as the CPU backend does, rounded to float) come from the step's table (rope_table: once per step, not once per
// block and layer, whose double sincos was most of a block's time).
//
// Shapes: qkv [numTokens, (numHeads + 2 numKvHeads) D]; qNorm, kNorm [D]; invFreq [D/2] (zeros from rotPairs on);
//   ropeTable [numTokens, 2, D/2] f32 (cos, then sin) or null.
// Launch: grid (numTokens, ceil((numHeads + numKvHeads) / ROPE_WARPS)), block ROPE_WARPS * 32;
//   D/2 a multiple of 32, D <= 256. rope_table: grid ceil(numTokens D/2 / 256), block 256.
#include "common.cuh"
#include "rope.cuh"

// ROPE_WARPS, warps a block (a head each): from TypeScript (kernel-defines.ts)

template <typename T, typename C = T>
__device__ __forceinline__ void qk_norm_rope(T* qkv, const T* qNorm, const T* kNorm, int applyNorm,
                                             const float* invFreq, const int* positions, C* kCache, C* vCache,
                                             const int* slotMapping, int numHeads, int numKvHeads, int headDim,
                                             int rotPairs, float eps, int t, int headBlock,
                                             const float* ropeTable = nullptr) {
  __shared__ float cosOf[ROPE_MAX_PAIRS * 32], sinOf[ROPE_MAX_PAIRS * 32];
  const int half = headDim >> 1;
  const float* cosRow = ropeTable + (long long)t * headDim;
  if (ropeTable == nullptr) {
    for (int i = threadIdx.x; i < half; i += blockDim.x) rope_angle(positions[t], invFreq[i], cosOf[i], sinOf[i]);
    __syncthreads();
    cosRow = cosOf;
  }
  const float* sinRow = ropeTable == nullptr ? sinOf : cosRow + half;
  const int head = headBlock * ROPE_WARPS + (threadIdx.x >> 5);
  if (head >= numHeads + numKvHeads) return;
  T* x = qkv + (long long)t * (numHeads + 2 * numKvHeads) * headDim + (long long)head * headDim;
  const T* w = !applyNorm ? nullptr : head < numHeads ? qNorm : kNorm;
  const long long slot = kCache != nullptr && head >= numHeads ? (long long)slotMapping[t] : -1;
  const long long at = (slot * numKvHeads + (head - numHeads)) * headDim;
  rope_head<T, C>(x, x, w, cosRow, sinRow, headDim, rotPairs, eps, slot >= 0 ? kCache + at : nullptr,
               slot >= 0 ? vCache + at : nullptr, x + (long long)numKvHeads * headDim);
}

// suffix: the compute type, then _fp8 where the cache is FP8 (C)
#define INSTANTIATE(suffix, T, C)                                                                               \
  extern "C" __global__ void qk_norm_rope_##suffix(T* qkv, const T* qNorm, const T* kNorm, int applyNorm,      \
                                                   const float* invFreq, const int* positions, C* kCache,      \
                                                   C* vCache, const int* slotMapping, int numHeads,            \
                                                   int numKvHeads, int headDim, int rotPairs, float eps,       \
                                                   const float* ropeTable) {                                   \
    pdl_begin();                                                                                               \
    qk_norm_rope<T, C>(qkv, qNorm, kNorm, applyNorm, invFreq, positions, kCache, vCache, slotMapping, numHeads, \
                       numKvHeads, headDim, rotPairs, eps, blockIdx.x, blockIdx.y, ropeTable);                 \
  }

INSTANTIATE(bf16, bf16_t, bf16_t)
INSTANTIATE(bf16_fp8, bf16_t, fp8_t)
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
