// Elementwise activation.
//   silu_mul: out[t, i] = silu(gateUp[t, i]) * gateUp[t, I + i]    gateUp [T, 2I], out [T, I]
//             a thread takes VEC consecutive columns (16-byte loads and stores) when I % VEC == 0, else one;
//             launch: grid (ceil(T * I / (256 * per)), block 256, per = I % VEC == 0 ? VEC : 1
//   sigmoid_mul: out[i] = x[i] * sigmoid(gate[i])    x, gate, out [T, N], n = T N (output-gated attention: Qwen3.5)
//             the sigmoid by expf (not __expf) and a rounded division, within an f32 ulp or two of the CPU
//             backend's (in double, rounded to f32), then one rounded product; a thread takes VEC consecutive
//             elements (16-byte loads and stores) when n % VEC == 0, else one;
//             launch: grid ceil(n / (256 * per)), block 256, per = n % VEC == 0 ? VEC : 1
//   silu_mul_q8: silu_mul, and its output's q8 blocks for a GGUF GEMV (below)
//   add_sigmoid_gated: acc[t, i] += sigmoid(gate[t]) * y[t, i]    acc, y [T, N], gate [T, 1] (a shared expert's output
//             scaled by its gate and added to the routed experts' sum: Qwen3-Next, Qwen3.5-MoE); the sigmoid as
//             sigmoid_mul's, its product with y rounded once, then the sum rounded to acc's type; one element a thread;
//             launch: grid ceil(T N / 256), block 256
#include "common.cuh"

template <typename T>
__device__ __forceinline__ float silu_mul_of(T g, T u) {
  const float gf = to_float(g);
  return gf / (1.f + __expf(-gf)) * to_float(u);
}

template <typename T>
__device__ __forceinline__ void silu_mul(const T* gateUp, T* out, int numTokens, int inter) {
  constexpr int VEC = 16 / (int)sizeof(T);
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (inter % VEC == 0) {
    const long long first = i * VEC;
    if (first >= (long long)numTokens * inter) return;
    const long long row = first / inter;
    const long long col = first - row * inter;
    union Pack { uint4 raw; T v[VEC]; };
    Pack g, u, o;
    g.raw = *reinterpret_cast<const uint4*>(gateUp + row * 2 * inter + col);
    u.raw = *reinterpret_cast<const uint4*>(gateUp + row * 2 * inter + inter + col);
#pragma unroll
    for (int e = 0; e < VEC; e++) o.v[e] = from_float<T>(silu_mul_of(g.v[e], u.v[e]));
    *reinterpret_cast<uint4*>(out + first) = o.raw;
    return;
  }
  if (i >= (long long)numTokens * inter) return;
  const long long row = i / inter;
  const long long col = i - row * inter;
  out[i] = from_float<T>(silu_mul_of(gateUp[row * 2 * inter + col], gateUp[row * 2 * inter + inter + col]));
}

template <typename T>
__device__ __forceinline__ float sigmoid_mul_of(T x, T g) {
  return __fmul_rn(to_float(x), __fdiv_rn(1.f, __fadd_rn(1.f, expf(-to_float(g)))));
}

template <typename T>
__device__ __forceinline__ void sigmoid_mul(const T* x, const T* gate, T* out, int numTokens, int cols) {
  constexpr int VEC = 16 / (int)sizeof(T);
  const long long n = (long long)numTokens * cols;
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (n % VEC == 0) {
    const long long first = i * VEC;
    if (first >= n) return;
    union Pack { uint4 raw; T v[VEC]; };
    Pack a, g, o;
    a.raw = *reinterpret_cast<const uint4*>(x + first);
    g.raw = *reinterpret_cast<const uint4*>(gate + first);
#pragma unroll
    for (int e = 0; e < VEC; e++) o.v[e] = from_float<T>(sigmoid_mul_of(a.v[e], g.v[e]));
    *reinterpret_cast<uint4*>(out + first) = o.raw;
    return;
  }
  if (i >= n) return;
  out[i] = from_float<T>(sigmoid_mul_of(x[i], gate[i]));
}

template <typename T>
__device__ __forceinline__ void add_sigmoid_gated(T* acc, const T* gate, const T* y, int numTokens, int cols) {
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= (long long)numTokens * cols) return;
  const float s = __fdiv_rn(1.f, __fadd_rn(1.f, expf(-to_float(gate[i / cols]))));
  acc[i] = from_float<T>(__fadd_rn(to_float(acc[i]), __fmul_rn(s, to_float(y[i]))));
}

#ifndef QUIRE_DEVICE_ONLY  // gemm_chain.cu includes the device functions alone
#define INSTANTIATE(suffix, T)                                                                          \
  extern "C" __global__ void silu_mul_##suffix(const T* gateUp, T* out, int numTokens, int inter) {     \
    pdl_begin();                                                                                        \
    silu_mul<T>(gateUp, out, numTokens, inter);                                                         \
  }                                                                                                     \
  extern "C" __global__ void sigmoid_mul_##suffix(const T* x, const T* gate, T* out, int numTokens,    \
                                                  int cols) {                                           \
    pdl_begin();                                                                                        \
    sigmoid_mul<T>(x, gate, out, numTokens, cols);                                                      \
  }                                                                                                     \
  extern "C" __global__ void add_sigmoid_gated_##suffix(T* acc, const T* gate, const T* y, int numTokens, \
                                                        int cols) {                                     \
    pdl_begin();                                                                                        \
    add_sigmoid_gated<T>(acc, gate, y, numTokens, cols);                                                \
  }

INSTANTIATE(bf16, bf16_t)
#undef INSTANTIATE

#include "gguf_q8.cuh"

// silu_mul_q8: silu_mul's output (the same bits) and its q8 blocks for the GGUF GEMV after it (gguf_q8.cuh), so the
// GEMV does not quantize it again. inter % 32 == 0: a thread's 8 columns, 4 threads a q8 block.
// launch: grid (ceil(T * I / 8 / 256)), block 256
extern "C" __global__ void silu_mul_q8_bf16(const bf16_t* gateUp, bf16_t* out, signed char* xq, int2* xds, int numTokens,
                                            int inter) {
  pdl_begin();
  const long long first = ((long long)blockIdx.x * blockDim.x + threadIdx.x) * 8;
  const bool active = first < (long long)numTokens * inter;
  float v[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
  if (active) {
    const long long row = first / inter;
    const long long col = first - row * inter;
    union Pack { uint4 raw; bf16_t v[8]; };
    Pack g, u, o;
    g.raw = *reinterpret_cast<const uint4*>(gateUp + row * 2 * inter + col);
    u.raw = *reinterpret_cast<const uint4*>(gateUp + row * 2 * inter + inter + col);
#pragma unroll
    for (int e = 0; e < 8; e++) {
      o.v[e] = from_float<bf16_t>(silu_mul_of(g.v[e], u.v[e]));
      v[e] = to_float(o.v[e]);
    }
    *reinterpret_cast<uint4*>(out + first) = o.raw;
  }
  gguf_q8_store8(v, active, xq + first, xds + first / 32);
}
#endif
