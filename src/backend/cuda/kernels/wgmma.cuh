// Hopper warpgroup MMA (wgmma, sm_90a): shared-memory matrix descriptors for K-major tiles in the 128-byte swizzle,
// and the m64n128k16 bf16 MMA with f32 accumulators. Hand-written: the engine drives NVRTC, not CUTLASS, and a
// grouped GEMM whose A rows are gathered through an index (moe_wgmma.cu) is the product's own.
//
// A K-major tile of R rows of 64 bf16 (128 bytes) is stored row r at 128 r, its 16-byte chunk j at 16 (j ^ (r % 8)):
// the 128-byte swizzle, whose 8-row atoms (1,024 bytes) the descriptor steps by its stride. The tile's base must be
// 1,024-aligned. Stepping k by 16 within the 64 adds 32 bytes to the start address.
#pragma once

/** The descriptor of a K-major, 128-byte-swizzled tile at shared address `addr` (1,024-aligned, plus 32 k16). */
__device__ __forceinline__ unsigned long long wgmma_desc(unsigned addr) {
  constexpr unsigned long long LBO = 16 >> 4;     // unused by swizzled K-major tiles (CUTLASS sets 1)
  constexpr unsigned long long SBO = 1024 >> 4;   // one 8-row atom to the next
  return (unsigned long long)((addr & 0x3ffff) >> 4) | (LBO << 16) | (SBO << 32) | (1ull << 62);
}

/** Orders this thread's register and shared-memory accesses before the warpgroup's next wgmma. */
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}
/** Makes shared memory written by the generic proxy (st.shared, cp.async) visible to wgmma's reads. */
__device__ __forceinline__ void fence_proxy_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

/**
 * d += A B^T over k16: A 64 rows (descA), B 128 rows (descB), both K-major. d[4 j + r] is row 16 w + g + 8 (r / 2),
 * column 8 j + 2 c + (r % 2) of the 64 x 128 tile, for warp w of the warpgroup and lane (g, c) = (lane / 4, lane % 4).
 */
__device__ __forceinline__ void wgmma_m64n128k16_bf16(float d[64], unsigned long long descA, unsigned long long descB) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
      "}, %64, %65, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "l"(descA), "l"(descB), "r"(1));
}
