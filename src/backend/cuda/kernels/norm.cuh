// The RMS norm's register-row body (norm.cu's kernels; moe.cu's combine fused with the residual add and the norm
// after it): one row a block, fp32 sums of squares spelled out as fma, so every kernel that includes it gets the same
// bits for the same row, block size and NORM_VEC.
#pragma once
#include "common.cuh"
#include "gguf_q8.cuh"

// The norms let the next kernel launch before they wait for the kernel before (common.cuh, pdl_trigger_if): the chain
// GEMM after a norm then reads its first weight stages through the GEMM before's tail, not only through the norm
// (docs/perf-log.md, session 24). 0 keeps it after the wait (QUIRE_KERNEL_DEFINES=NORM_TRIGGER_EARLY=0).
#ifndef NORM_TRIGGER_EARLY
#define NORM_TRIGGER_EARLY 1
#endif

// NORM_VEC, chunks of 8 bf16 (16 bytes) a thread keeps in registers on the fast path (hidden <= 8 * blockDim *
// NORM_VEC): from TypeScript (kernel-defines.ts), whose launches size the block by it (gemm.ts normThreads).

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

/** What add_rms_norm adds to the residual: a bf16 row in memory (moe.cu's combine is the other source). */
struct NormAddRow {
  const bf16_t* row;
  /** The 8 values at column `at` (its loads only: norm_row_fast issues every chunk's before it uses any). */
  __device__ __forceinline__ void operator()(int at, float* f) const { load8(row + at, f); }
};

// out = x * rsqrt(mean(x^2) + eps) * w over one row held in registers (add: x = residual + add's values, rounded to
// bf16 and stored to resOut first, unless null: the kernels pass the residual itself). Loads are issued
// together, so the row costs one memory latency, not one per element. wPre: the weights as norm_weights_fast
// read them, or null (read here). Add: NormAddRow, or any source of bf16-exact values by column (moe.cu).
// xq, xds (or null): the row's q8 blocks for a GGUF GEMV (gguf_q8.cuh; hidden % 32 == 0), quantized from the bf16
// values stored, straight from the registers: lanes 4i..4i+3 hold a block's 4 chunks (a chunk is thread + c *
// blockDim, blockDim a multiple of 32), so no barrier and no read-back of the row.
template <typename Add>
__device__ __forceinline__ void norm_row_fast(const Add* add, const bf16_t* res, bf16_t* resOut, const bf16_t* x,
                                              const bf16_t* w, bf16_t* dst, int hidden, float eps,
                                              const float (*wPre)[8] = nullptr, signed char* xq = nullptr,
                                              int2* xds = nullptr) {
  const int numChunks = hidden / 8;
  float v[NORM_VEC][8], a[NORM_VEC][8];
  float sumsq = 0.f;
#pragma unroll
  for (int c = 0; c < NORM_VEC; c++) {  // every load first
    const int at = (threadIdx.x + c * blockDim.x) * 8;
    if (at >= numChunks * 8) continue;
    load8(add ? res + at : x + at, v[c]);
    if (add) (*add)(at, a[c]);
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
    const bool active = at < numChunks * 8;
    float stored[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    if (active) {
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
#pragma unroll
      for (int e = 0; e < 8; e++) stored[e] = to_float(from_float<bf16_t>(v[c][e]));
    }
    // every lane of the warp (shuffles): a chunk past the row holds zeros and writes nothing
    if (xq) gguf_q8_store8(stored, active, xq + at, xds + at / 32);
  }
}

