// Writes this step's k and v rows of the fused qkv buffer into the paged cache.
//
//   cache (one layer, K and V separate): [numBlocks, blockSize, numKvHeads, D]
//   slot = page * blockSize + offset  ->  element (slot, kvHead, d) at (slot * numKvHeads + kvHead) * D + d
//   slotMapping[t] < 0: token t is not written (padding).
//
// Shapes: qkv [numTokens, (numHeads + 2 numKvHeads) D]; slotMapping [numTokens].
// Launch: grid (numTokens), block 256; threads stride over numKvHeads * D.
#include "common.cuh"

template <typename T, typename C>
__device__ __forceinline__ void kv_write(const T* qkv, C* kCache, C* vCache, const int* slotMapping, int numHeads,
                                         int numKvHeads, int headDim) {
  const int t = blockIdx.x;
  const long long slot = slotMapping[t];
  if (slot < 0) return;
  const int width = numKvHeads * headDim;
  const T* k = qkv + (long long)t * (numHeads + 2 * numKvHeads) * headDim + (long long)numHeads * headDim;
  const T* v = k + width;
  for (int i = threadIdx.x; i < width; i += blockDim.x) {
    kCache[slot * width + i] = to_cache<C>(k[i]);
    vCache[slot * width + i] = to_cache<C>(v[i]);
  }
}

// suffix: the compute type, then _fp8 where the cache is FP8 (C)
#define INSTANTIATE(suffix, T, C)                                                                         \
  extern "C" __global__ void kv_write_##suffix(const T* qkv, C* kCache, C* vCache, const int* slotMapping, \
                                               int numHeads, int numKvHeads, int headDim) {               \
    kv_write<T, C>(qkv, kCache, vCache, slotMapping, numHeads, numKvHeads, headDim);                      \
  }

INSTANTIATE(bf16, bf16_t, bf16_t)
INSTANTIATE(bf16_fp8, bf16_t, fp8_t)
