// Elementwise and per-row reductions.
//   silu_mul: out[t, i] = silu(gateUp[t, i]) * gateUp[t, I + i]    gateUp [T, 2I], out [T, I]
//             launch: grid (ceil(T*I / 256)), block 256
//   argmax:   ids[r] = argmax_v logits[r, v] (lowest index on ties; NaN never wins)   logits [R, vocab]
//             launch: grid (R), block 1024
#include "common.cuh"

template <typename T>
__device__ __forceinline__ void silu_mul(const T* gateUp, T* out, int numTokens, int inter) {
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= (long long)numTokens * inter) return;
  const long long row = i / inter;
  const long long col = i - row * inter;
  const float g = to_float(gateUp[row * 2 * inter + col]);
  const float u = to_float(gateUp[row * 2 * inter + inter + col]);
  out[i] = from_float<T>(g / (1.f + __expf(-g)) * u);
}

__device__ __forceinline__ bool better(float v, int i, float bestV, int bestI) {
  return v > bestV || (v == bestV && i < bestI);
}

template <typename T>
__device__ __forceinline__ void argmax(const T* logits, int vocab, int* ids) {
  __shared__ float vals[32];
  __shared__ int idxs[32];
  const T* row = logits + (long long)blockIdx.x * vocab;
  float bestV = NEG_INF;
  int bestI = 0x7fffffff;
  for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
    const float v = to_float(row[i]);
    if (better(v, i, bestV, bestI)) { bestV = v; bestI = i; }
  }
  for (int o = 16; o > 0; o >>= 1) {
    const float v = __shfl_xor_sync(FULL_MASK, bestV, o);
    const int i = __shfl_xor_sync(FULL_MASK, bestI, o);
    if (better(v, i, bestV, bestI)) { bestV = v; bestI = i; }
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) { vals[warp] = bestV; idxs[warp] = bestI; }
  __syncthreads();
  if (warp == 0) {
    const bool live = lane < (int)(blockDim.x >> 5);
    bestV = live ? vals[lane] : NEG_INF;
    bestI = live ? idxs[lane] : 0x7fffffff;
    for (int o = 16; o > 0; o >>= 1) {
      const float v = __shfl_xor_sync(FULL_MASK, bestV, o);
      const int i = __shfl_xor_sync(FULL_MASK, bestI, o);
      if (better(v, i, bestV, bestI)) { bestV = v; bestI = i; }
    }
    if (lane == 0) ids[blockIdx.x] = bestI == 0x7fffffff ? 0 : bestI;
  }
}

#define INSTANTIATE(suffix, T)                                                                          \
  extern "C" __global__ void silu_mul_##suffix(const T* gateUp, T* out, int numTokens, int inter) {     \
    silu_mul<T>(gateUp, out, numTokens, inter);                                                         \
  }                                                                                                     \
  extern "C" __global__ void argmax_##suffix(const T* logits, int vocab, int* ids) {                    \
    argmax<T>(logits, vocab, ids);                                                                      \
  }

INSTANTIATE(bf16, bf16_t)
INSTANTIATE(f32, float)
