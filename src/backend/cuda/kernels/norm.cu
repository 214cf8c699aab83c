// RMSNorm over rows, fp32 accumulation.
//   rms_norm:     out[t] = x[t] * rsqrt(mean(x[t]^2) + eps) * w
//   add_rms_norm: residual[t] += x[t] (in place, rounded to T); out[t] = rms_norm(residual[t]) * w
// Shapes: x, residual, out [numTokens, hidden]; w [hidden].
// Launch: grid (numTokens), block 256 (a multiple of 32); threads stride over hidden.
#include "common.cuh"

template <typename T>
__device__ __forceinline__ void rms_norm(const T* x, const T* w, T* out, int hidden, float eps) {
  const T* row = x + (long long)blockIdx.x * hidden;
  T* dst = out + (long long)blockIdx.x * hidden;
  float sumsq = 0.f;
  for (int i = threadIdx.x; i < hidden; i += blockDim.x) {
    const float v = to_float(row[i]);
    sumsq += v * v;
  }
  const float inv = rsqrtf(block_sum(sumsq) / hidden + eps);
  for (int i = threadIdx.x; i < hidden; i += blockDim.x) dst[i] = from_float<T>(to_float(row[i]) * inv * to_float(w[i]));
}

template <typename T>
__device__ __forceinline__ void add_rms_norm(const T* x, T* residual, const T* w, T* out, int hidden, float eps) {
  const T* add = x + (long long)blockIdx.x * hidden;
  T* res = residual + (long long)blockIdx.x * hidden;
  T* dst = out + (long long)blockIdx.x * hidden;
  float sumsq = 0.f;
  for (int i = threadIdx.x; i < hidden; i += blockDim.x) {
    const T sum = from_float<T>(to_float(res[i]) + to_float(add[i]));
    res[i] = sum;
    const float v = to_float(sum);
    sumsq += v * v;
  }
  const float inv = rsqrtf(block_sum(sumsq) / hidden + eps);
  for (int i = threadIdx.x; i < hidden; i += blockDim.x) dst[i] = from_float<T>(to_float(res[i]) * inv * to_float(w[i]));
}

#define INSTANTIATE(suffix, T)                                                                               \
  extern "C" __global__ void rms_norm_##suffix(const T* x, const T* w, T* out, int hidden, float eps) {     \
    rms_norm<T>(x, w, out, hidden, eps);                                                                     \
  }                                                                                                          \
  extern "C" __global__ void add_rms_norm_##suffix(const T* x, T* residual, const T* w, T* out, int hidden, \
                                                  float eps) {                                               \
    add_rms_norm<T>(x, residual, w, out, hidden, eps);                                                       \
  }

INSTANTIATE(bf16, bf16_t)
INSTANTIATE(f32, float)
