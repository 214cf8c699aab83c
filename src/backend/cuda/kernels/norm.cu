// RMSNorm over rows, fp32 accumulation.
//   rms_norm:     out[t] = x[t] * rsqrt(mean(x[t]^2) + eps) * w
//   add_rms_norm: residual[t] += x[t] (in place, rounded to T); out[t] = rms_norm(residual[t]) * w
//   add_rms_norm_q8: add_rms_norm, and out's q8 blocks for a GGUF GEMV (gguf_q8.cuh; below)
// Shapes: x, residual, out [numTokens, hidden]; w [hidden].
// Sums of squares are spelled out as fma, so no inlining context can contract them differently (the chain GEMMs'
// norms must get the same bits).
// Launch: grid (numTokens), block a multiple of 32 up to 256 (the host gives bf16 rows under 2048 wide one thread
// per 16-byte chunk: threads beyond the row's chunks add zeros to block_sum, so the width changes no bit).
// bf16 rows of hidden % 8 == 0 and hidden <= 8 * blockDim * NORM_VEC are held in registers (16-byte chunks,
// every load in flight at once); others stride over hidden.
#include "norm.cuh"
#include "gguf_q8.cuh"

// The register-row body and NORM_TRIGGER_EARLY: norm.cuh.

// Rows off the register path (bf16 rows norm_fast does not take): strided over hidden.
template <typename T>
__device__ __forceinline__ void rms_norm(const T* x, const T* w, T* out, int hidden, float eps) {
  const T* row = x + (long long)blockIdx.x * hidden;
  T* dst = out + (long long)blockIdx.x * hidden;
  float sumsq = 0.f;
  for (int i = threadIdx.x; i < hidden; i += blockDim.x) {
    const float v = to_float(row[i]);
    sumsq = __fmaf_rn(v, v, sumsq);
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
    sumsq = __fmaf_rn(v, v, sumsq);
  }
  const float inv = rsqrtf(block_sum(sumsq) / hidden + eps);
  for (int i = threadIdx.x; i < hidden; i += blockDim.x) dst[i] = from_float<T>(to_float(res[i]) * inv * to_float(w[i]));
}

// bf16 register rows read their weights before waiting for the kernel before (they never change), so the weights'
// latency hides under its end; the same arithmetic
extern "C" __global__ void rms_norm_bf16(const bf16_t* x, const bf16_t* w, bf16_t* out, int hidden, float eps) {
  pdl_trigger_if(NORM_TRIGGER_EARLY);
  float wf[NORM_VEC][8];
  const bool fast = norm_fast(hidden);
  if (fast) norm_weights_fast(w, hidden, wf);
  pdl_wait_then_trigger(NORM_TRIGGER_EARLY);
  const long long at = (long long)blockIdx.x * hidden;
  if (fast) norm_row_fast<NormAddRow>(nullptr, nullptr, nullptr, x + at, w, out + at, hidden, eps, wf);
  else rms_norm<bf16_t>(x, w, out, hidden, eps);
}
__device__ __forceinline__ void add_rms_norm_row(const bf16_t* x, bf16_t* residual, const bf16_t* w, bf16_t* out,
                                                 int hidden, float eps) {
  pdl_trigger_if(NORM_TRIGGER_EARLY);
  float wf[NORM_VEC][8];
  const bool fast = norm_fast(hidden);
  if (fast) norm_weights_fast(w, hidden, wf);
  pdl_wait_then_trigger(NORM_TRIGGER_EARLY);
  const long long at = (long long)blockIdx.x * hidden;
  if (fast) {
    const NormAddRow add{x + at};
    norm_row_fast(&add, residual + at, residual + at, nullptr, w, out + at, hidden, eps, wf);
  } else {
    add_rms_norm<bf16_t>(x, residual, w, out, hidden, eps);
  }
}
extern "C" __global__ void add_rms_norm_bf16(const bf16_t* x, bf16_t* residual, const bf16_t* w, bf16_t* out,
                                             int hidden, float eps) {
  add_rms_norm_row(x, residual, w, out, hidden, eps);
}

// add_rms_norm, and its output row's q8 blocks for the GGUF GEMV after it (gguf_q8.cuh), so the GEMV does not quantize
// it again: the row as stored, read back after a barrier (the strided path's threads store each other's chunks), 8
// values a thread. hidden % 32 == 0.
extern "C" __global__ void add_rms_norm_q8_bf16(const bf16_t* x, bf16_t* residual, const bf16_t* w, bf16_t* out,
                                                signed char* xq, int2* xds, int hidden, float eps) {
  add_rms_norm_row(x, residual, w, out, hidden, eps);
  __syncthreads();
  const long long at = (long long)blockIdx.x * hidden;
  for (int c0 = 0; c0 < hidden; c0 += 8 * blockDim.x) {  // every thread of the block the same trips: the shuffles
    const int c = c0 + 8 * threadIdx.x;
    const bool active = c < hidden;
    float v[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    if (active) load8(out + at + c, v);
    gguf_q8_store8(v, active, xq + at + c, xds + (at + c) / 32);
  }
}
