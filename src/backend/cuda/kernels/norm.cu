// RMSNorm over rows, fp32 accumulation.
//   rms_norm:     out[t] = x[t] * rsqrt(mean(x[t]^2) + eps) * w
//   add_rms_norm: residual[t] += x[t] (in place, rounded to T); out[t] = rms_norm(residual[t]) * w
// Shapes: x, residual, out [numTokens, hidden]; w [hidden].
// Sums of squares are spelled out as fma, so no inlining context can contract them differently (the chain GEMMs'
// norms must get the same bits).
// Launch: grid (numTokens), block a multiple of 32 up to 256 (the host gives bf16 rows under 2048 wide one thread
// per 16-byte chunk: threads beyond the row's chunks add zeros to block_sum, so the width changes no bit).
// bf16 rows of hidden % 8 == 0 and hidden <= 8 * blockDim * NORM_VEC are held in registers (16-byte chunks,
// every load in flight at once); others stride over hidden.
#include "common.cuh"

// NORM_VEC, chunks of 8 bf16 (16 bytes) a thread keeps in registers on the fast path (hidden <= 8 * blockDim *
// NORM_VEC): from TypeScript (kernel-defines.ts), whose launches size the block by it (gemm.ts normThreads).
// The norms let the next kernel launch before they wait for the kernel before (common.cuh, pdl_trigger_if): the chain
// GEMM after a norm then reads its first weight stages through the GEMM before's tail, not only through the norm
// (docs/perf-log.md, session 24). 0 keeps it after the wait (QUIRE_KERNEL_DEFINES=NORM_TRIGGER_EARLY=0).
#ifndef NORM_TRIGGER_EARLY
#define NORM_TRIGGER_EARLY 1
#endif

__device__ __forceinline__ void load8(const bf16_t* p, float* f) {
  const uint4 v = *reinterpret_cast<const uint4*>(p);
  const unsigned w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; i++) {
    f[2 * i] = __uint_as_float(w[i] << 16);
    f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
  }
}

__device__ __forceinline__ void store8(bf16_t* p, const float* f) {
  unsigned w[4];
#pragma unroll
  for (int i = 0; i < 4; i++) {
    w[i] = (unsigned)from_float<bf16_t>(f[2 * i]).bits | ((unsigned)from_float<bf16_t>(f[2 * i + 1]).bits << 16);
  }
  *reinterpret_cast<uint4*>(p) = make_uint4(w[0], w[1], w[2], w[3]);
}

/** Whether a row fits the register fast path (16-byte chunks, all loads issued before any store). */
__device__ __forceinline__ bool norm_fast(int hidden) {
  return hidden % 8 == 0 && hidden <= 8 * (int)blockDim.x * NORM_VEC;
}

/** This thread's weights of a register row (norm_row_fast's chunks), read before the kernel before has finished. */
__device__ __forceinline__ void norm_weights_fast(const bf16_t* w, int hidden, float wf[NORM_VEC][8]) {
#pragma unroll
  for (int c = 0; c < NORM_VEC; c++) {
    const int at = (threadIdx.x + c * blockDim.x) * 8;
    if (at < hidden / 8 * 8) load8(w + at, wf[c]);
  }
}

// out = x * rsqrt(mean(x^2) + eps) * w over one row held in registers (add: x = residual + add, rounded to
// bf16 and stored to resOut first, unless null: the kernels pass the residual itself). Loads are issued
// together, so the row costs one memory latency, not one per element. wPre: the weights as norm_weights_fast
// read them, or null (read here).
__device__ __forceinline__ void norm_row_fast(const bf16_t* add, const bf16_t* res, bf16_t* resOut, const bf16_t* x,
                                              const bf16_t* w, bf16_t* dst, int hidden, float eps,
                                              const float (*wPre)[8] = nullptr) {
  const int numChunks = hidden / 8;
  float v[NORM_VEC][8], a[NORM_VEC][8];
  float sumsq = 0.f;
#pragma unroll
  for (int c = 0; c < NORM_VEC; c++) {  // every load first
    const int at = (threadIdx.x + c * blockDim.x) * 8;
    if (at >= numChunks * 8) continue;
    load8(add ? res + at : x + at, v[c]);
    if (add) load8(add + at, a[c]);
  }
#pragma unroll
  for (int c = 0; c < NORM_VEC; c++) {
    const int at = (threadIdx.x + c * blockDim.x) * 8;
    if (at >= numChunks * 8) continue;
    if (add) {
#pragma unroll
      for (int e = 0; e < 8; e++) v[c][e] = to_float(from_float<bf16_t>(v[c][e] + a[c][e]));
      if (resOut) store8(resOut + at, v[c]);
    }
#pragma unroll
    for (int e = 0; e < 8; e++) sumsq = __fmaf_rn(v[c][e], v[c][e], sumsq);
  }
  const float inv = rsqrtf(block_sum(sumsq) / hidden + eps);
#pragma unroll
  for (int c = 0; c < NORM_VEC; c++) {
    const int at = (threadIdx.x + c * blockDim.x) * 8;
    if (at >= numChunks * 8) continue;
    float wf[8];
    if (wPre) {
#pragma unroll
      for (int e = 0; e < 8; e++) wf[e] = wPre[c][e];
    } else {
      load8(w + at, wf);
    }
#pragma unroll
    for (int e = 0; e < 8; e++) v[c][e] = v[c][e] * inv * wf[e];
    store8(dst + at, v[c]);
  }
}

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
  if (fast) norm_row_fast(nullptr, nullptr, nullptr, x + at, w, out + at, hidden, eps, wf);
  else rms_norm<bf16_t>(x, w, out, hidden, eps);
}
extern "C" __global__ void add_rms_norm_bf16(const bf16_t* x, bf16_t* residual, const bf16_t* w, bf16_t* out,
                                             int hidden, float eps) {
  pdl_trigger_if(NORM_TRIGGER_EARLY);
  float wf[NORM_VEC][8];
  const bool fast = norm_fast(hidden);
  if (fast) norm_weights_fast(w, hidden, wf);
  pdl_wait_then_trigger(NORM_TRIGGER_EARLY);
  const long long at = (long long)blockIdx.x * hidden;
  if (fast) norm_row_fast(x + at, residual + at, residual + at, nullptr, w, out + at, hidden, eps, wf);
  else add_rms_norm<bf16_t>(x, residual, w, out, hidden, eps);
}
