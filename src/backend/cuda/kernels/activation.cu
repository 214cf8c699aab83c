// Elementwise activation.
//   silu_mul: out[t, i] = silu(gateUp[t, i]) * gateUp[t, I + i]    gateUp [T, 2I], out [T, I]
//             launch: grid (ceil(T*I / 256)), block 256
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

#define INSTANTIATE(suffix, T)                                                                          \
  extern "C" __global__ void silu_mul_##suffix(const T* gateUp, T* out, int numTokens, int inter) {     \
    silu_mul<T>(gateUp, out, numTokens, inter);                                                         \
  }

INSTANTIATE(bf16, bf16_t)
INSTANTIATE(f32, float)
