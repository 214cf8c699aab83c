// Tensor-core building blocks (sm_80+), as inline PTX: bf16 mma.sync m16n8k16
// (and e4m3 m16n8k32, sm_89+) with fp32 accumulators, ldmatrix from shared
// memory, bf16x2 packing.
//
// Fragments of mma.m16n8k16 (g = lane / 4, t = lane % 4; a b32 register holds
// two bf16, the lower column or k index in its low half):
//
//   A 16x16 (m x k): a0 (m g,   k 2t..2t+1)   a2 (m g,   k 2t+8..2t+9)
//                    a1 (m g+8, k 2t..2t+1)   a3 (m g+8, k 2t+8..2t+9)
//   B 16x8  (k x n): b0 (k 2t..2t+1, n g)     b1 (k 2t+8..2t+9, n g)
//   C 16x8  f32:     c0 c1 (m g, n 2t, 2t+1)  c2 c3 (m g+8, n 2t, 2t+1)
//
// ldmatrix x4: lanes 8i..8i+7 give the 16-byte row addresses of 8x8 matrix i;
// register i then holds (row g, cols 2t..2t+1) of matrix i, or with .trans
// (rows 2t..2t+1, col g). Every row address must be 16-byte aligned.
#pragma once

struct __align__(16) u32x4 {
  unsigned x, y, z, w;
};

/** c += a * b on one m16n8k16 tile. */
__device__ __forceinline__ void mma_bf16_16816(float c[4], const unsigned a[4], unsigned b0, unsigned b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/**
 * c += a * b on one m16n8k32 tile of e4m3 (sm_89+; traps below): fragments as m16n8k16's, each b32 register four k
 * where bf16's holds two (a0 m g k 4t..4t+3, a2 m g k 4t+16..4t+19; b0 k 4t..4t+3, b1 k 4t+16..4t+19).
 */
__device__ __forceinline__ void mma_e4m3_16832(float c[4], const unsigned a[4], unsigned b0, unsigned b1) {
#if __CUDA_ARCH__ >= 890
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
  __trap();
#endif
}

__device__ __forceinline__ unsigned shared_addr(const void* p) {
  unsigned r;
  asm("{ .reg .u64 a; cvta.to.shared.u64 a, %1; cvt.u32.u64 %0, a; }" : "=r"(r) : "l"(p));
  return r;
}

__device__ __forceinline__ void ldmatrix_x4(unsigned r[4], const void* rowAddr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_addr(rowAddr)));
}

/** ldmatrix_x4 at a shared-space address (shared_addr): a loop that steps it saves the generic-to-shared math. */
__device__ __forceinline__ void ldmatrix_x4_at(unsigned r[4], unsigned sharedAddr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(sharedAddr));
}

__device__ __forceinline__ void ldmatrix_x4_trans(unsigned r[4], const void* rowAddr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_addr(rowAddr)));
}

/** Two floats as bf16x2 (round to nearest even): `lo` in the low half. */
__device__ __forceinline__ unsigned pack_bf16x2(float lo, float hi) {
  unsigned r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

/** 2^x (approximate, flushes denormals; 2^-inf = 0). */
__device__ __forceinline__ float fast_exp2(float x) {
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
}

/** 16 bytes global -> shared without registers (sm_80+); `valid` false writes 16 zero bytes and reads nothing. */
__device__ __forceinline__ void cp_async_16(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(shared_addr(dst)), "l"(src), "r"(valid ? 16 : 0)
               : "memory");
}

/** cp_async_16 to a shared-space address (shared_addr plus an offset, which ptxas folds into the copy). */
__device__ __forceinline__ void cp_async_16_at(unsigned dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0) : "memory");
}

/**
 * cp_async_16 of a weight, which a decode step streams once: marked to leave L2 first (evict_first), so the GB of
 * weights a step reads pass through L2 without pushing out what is read again (the KV cache, the activations;
 * docs/perf-log.md, session 26). The same bytes and bits; QUIRE_KERNEL_DEFINES=CHAIN_EVICT_FIRST=0 drops the hint.
 */
#ifndef CHAIN_EVICT_FIRST
#define CHAIN_EVICT_FIRST 1
#endif
__device__ __forceinline__ void cp_async_16_stream(void* dst, const void* src, bool valid) {
#if CHAIN_EVICT_FIRST
  unsigned long long policy;
  asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
  asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2, %3;" ::"r"(shared_addr(dst)), "l"(src),
               "r"(valid ? 16 : 0), "l"(policy) : "memory");
#else
  cp_async_16(dst, src, valid);
#endif
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }

/** Waits until at most N of this thread's committed copy groups are still in flight. */
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}
