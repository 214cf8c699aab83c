// Fused per-head RMSNorm (optional, Qwen3 q_norm / k_norm) and rotary embedding
// (neox half-split), in place on the q and k heads of the fused qkv buffer.
//
//   qkv row t: | q head 0 .. numHeads-1 | k head 0 .. numKvHeads-1 | v heads (untouched) |
//   each head: | x1 = [0, D/2) | x2 = [D/2, D) |
//   angle_i = positions[t] * invFreq[i];  x1' = x1 cos - x2 sin;  x2' = x2 cos + x1 sin
//
// With kCache non-null, the k head blocks also write the roped k and the v head into the paged cache at
// slotMapping[t] (as kv_write.cu does: [numBlocks, blockSize, numKvHeads, D], slot < 0 not written).
//
// Shapes: qkv [numTokens, (numHeads + 2 numKvHeads) D]; qNorm, kNorm [D]; invFreq [D/2].
// Launch: grid (numTokens, numHeads + numKvHeads), block D/2 (D/2 a multiple of 32).
#include "common.cuh"

template <typename T>
__device__ __forceinline__ void qk_norm_rope(T* qkv, const T* qNorm, const T* kNorm, int applyNorm,
                                             const float* invFreq, const int* positions, T* kCache, T* vCache,
                                             const int* slotMapping, int numHeads, int numKvHeads, int headDim,
                                             float eps) {
  const int t = blockIdx.x;
  const int head = blockIdx.y;
  const int half = headDim >> 1;
  const int i = threadIdx.x;
  T* x = qkv + (long long)t * (numHeads + 2 * numKvHeads) * headDim + (long long)head * headDim;
  float x1 = to_float(x[i]);
  float x2 = to_float(x[i + half]);
  if (applyNorm) {
    const T* w = head < numHeads ? qNorm : kNorm;
    const float inv = rsqrtf(block_sum(x1 * x1 + x2 * x2) / headDim + eps);
    x1 = x1 * inv * to_float(w[i]);
    x2 = x2 * inv * to_float(w[i + half]);
  }
  double s, c;
  sincos((double)positions[t] * (double)invFreq[i], &s, &c);
  const float sf = (float)s, cf = (float)c;
  const T y1 = from_float<T>(x1 * cf - x2 * sf), y2 = from_float<T>(x2 * cf + x1 * sf);
  x[i] = y1;
  x[i + half] = y2;
  if (kCache != nullptr && head >= numHeads) {
    const long long slot = slotMapping[t];
    if (slot < 0) return;
    const long long at = (slot * numKvHeads + (head - numHeads)) * headDim;
    const T* v = x + (long long)numKvHeads * headDim;
    kCache[at + i] = y1;
    kCache[at + i + half] = y2;
    vCache[at + i] = v[i];
    vCache[at + i + half] = v[i + half];
  }
}

#define INSTANTIATE(suffix, T)                                                                                  \
  extern "C" __global__ void qk_norm_rope_##suffix(T* qkv, const T* qNorm, const T* kNorm, int applyNorm,      \
                                                   const float* invFreq, const int* positions, T* kCache,      \
                                                   T* vCache, const int* slotMapping, int numHeads,            \
                                                   int numKvHeads, int headDim, float eps) {                   \
    qk_norm_rope<T>(qkv, qNorm, kNorm, applyNorm, invFreq, positions, kCache, vCache, slotMapping, numHeads,   \
                    numKvHeads, headDim, eps);                                                                 \
  }

INSTANTIATE(bf16, bf16_t)
INSTANTIATE(f32, float)
