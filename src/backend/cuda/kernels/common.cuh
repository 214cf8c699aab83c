// Shared by every kernel file: the bf16 storage type, float conversions,
// warp/block reductions, and the layout of the step metadata header.
//
// No system or toolkit headers: NVRTC on a machine with only the driver and the
// NVRTC wheel has none, so bf16 is our own 2-byte storage type converted with
// one PTX instruction (round to nearest even), and everything else is builtin.
#pragma once

struct __align__(2) bf16_t {
  unsigned short bits;
};

__device__ __forceinline__ float to_float(bf16_t v) { return __uint_as_float(((unsigned)v.bits) << 16); }
__device__ __forceinline__ float to_float(float v) { return v; }

template <typename T> __device__ __forceinline__ T from_float(float v);
template <> __device__ __forceinline__ float from_float<float>(float v) { return v; }
template <> __device__ __forceinline__ bf16_t from_float<bf16_t>(float v) {
  unsigned short r;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r) : "f"(v));
  return bf16_t{r};
}

/**
 * An FP8 E4M3 KV cache element (vLLM's --kv-cache-dtype fp8 with scale 1): round to nearest even, saturated to
 * +-448. The conversions are sm_89+ instructions; the backend refuses an FP8 cache below (elsewhere they trap).
 */
struct __align__(1) fp8_t {
  unsigned char bits;
};

/** Two e4m3 bytes (the low one first in memory) to floats. */
__device__ __forceinline__ void fp8x2_to_floats(unsigned short pair, float& lo, float& hi) {
#if __CUDA_ARCH__ >= 890
  unsigned h2;
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h2) : "h"(pair));
  asm("{.reg .b16 l, h; mov.b32 {l, h}, %2; cvt.f32.f16 %0, l; cvt.f32.f16 %1, h;}" : "=f"(lo), "=f"(hi) : "r"(h2));
#else
  __trap();
#endif
}

__device__ __forceinline__ float to_float(fp8_t v) {
  float lo, hi;
  fp8x2_to_floats(v.bits, lo, hi);
  return lo;
}
template <> __device__ __forceinline__ fp8_t from_float<fp8_t>(float v) {
#if __CUDA_ARCH__ >= 890
  unsigned short pair;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(pair) : "f"(0.f), "f"(v));  // b: the low byte
  return fp8_t{(unsigned char)(pair & 0xff)};
#else
  __trap();
  return fp8_t{0};
#endif
}

/** A cache element from a value of the compute type (an FP8 cache rounds the bf16 value once more). */
template <typename C, typename T> __device__ __forceinline__ C to_cache(T v) { return from_float<C>(to_float(v)); }
template <> __device__ __forceinline__ bf16_t to_cache<bf16_t, bf16_t>(bf16_t v) { return v; }
template <> __device__ __forceinline__ float to_cache<float, float>(float v) { return v; }

/** Two consecutive elements as floats (p must be 4-byte aligned for bf16). */
__device__ __forceinline__ void load2(const bf16_t* p, float& a, float& b) {
  unsigned w = *reinterpret_cast<const unsigned*>(p);
  a = __uint_as_float(w << 16);
  b = __uint_as_float(w & 0xffff0000u);
}
__device__ __forceinline__ void load2(const float* p, float& a, float& b) {
  a = p[0];
  b = p[1];
}

// Programmatic dependent launch (sm_90+; no-ops below). A kernel launched as a dependent (device.ts) may start while
// the kernel before it finishes: it may read what never changes (weights) at once, but must pdl_wait() before it reads
// what that kernel wrote or writes anything (pdl_wait returns once the kernel before has finished and its writes are
// visible). pdl_launch_dependents() lets a dependent launched after this kernel start early; without it the
// dependent starts when this kernel ends. Neither changes what a kernel computes.
__device__ __forceinline__ void pdl_wait() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_launch_dependents() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
// A kernel's launch_dependents before its wait (`early`: pdl_trigger_if first, pdl_wait_then_trigger where it waits)
// or after it (pdl_begin's order): early lets the next kernel's pre-wait reads stream through this one's wait too.
__device__ __forceinline__ void pdl_trigger_if(bool early) {
  if (early) pdl_launch_dependents();
}
__device__ __forceinline__ void pdl_wait_then_trigger(bool early) {
  pdl_wait();
  if (!early) pdl_launch_dependents();
}
/** First statement of a kernel launched as a dependent that reads nothing early: wait, then let the next one launch. */
__device__ __forceinline__ void pdl_begin() { pdl_wait_then_trigger(false); }

/** A kernel's dynamic shared memory as an array `name` of T (a macro, so a CPU emulation can give it storage). */
#define DYNAMIC_SHARED(T, name) extern __shared__ T name[]

#define NEG_INF (-__int_as_float(0x7f800000))
#define FULL_MASK 0xffffffffu

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(FULL_MASK, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(FULL_MASK, v, o));
  return v;
}

/** Sum over the block; blockDim.x must be a multiple of 32 (at most 1024). Every thread gets the result. */
__device__ __forceinline__ float block_sum(float v) {
  __shared__ float partial[32];
  __shared__ float total;
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  v = warp_sum(v);
  __syncthreads();
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (warp == 0) {
    float s = lane < (int)(blockDim.x >> 5) ? partial[lane] : 0.f;
    s = warp_sum(s);
    if (lane == 0) total = s;
  }
  __syncthreads();
  return total;
}

// Step metadata header (int32 words at the start of the device metadata buffer): META_NUM_TOKENS, META_NUM_SEQS,
// META_BLOCK_TABLE_STRIDE, its word offsets, come from TypeScript (step-meta.ts, through kernel-defines.ts).
