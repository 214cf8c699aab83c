// Mixture-of-experts grouped GEMMs on Hopper's warpgroup MMA (wgmma), for prompt chunks: gate_up + silu_mul, and
// down, over moe_group's tile lists, as moe.cu's tiled builds, but with the operands read by the tensor cores from
// shared memory (wgmma descriptors) instead of through registers. The mma.sync builds spend a third of their issue
// slots building a operands and stay latency-bound at 8 warps an SM (docs/perf-log.md, session 40). Compiled for
// sm_90a only (compile.ts ARCH_SPECIFIC_FILES); moe-plan.ts picks these builds where QUIRE_MOE_WGMMA_MIN_ROWS says,
// never in the batch-invariant mode: their sums are the tensor cores' own, so not the mma.sync builds' bits.
//
// A block: two warpgroups, 128 tokens (warpgroup w: 64 of them, the MMA's A) by 128 weight rows (the MMA's B; gate_up:
// 64 outputs' gate rows, then their up rows), k staged 64 at a time (128 bytes a row, the 128-byte swizzle of
// wgmma.cuh), MOE_WGMMA_STAGES deep with cp.async: STAGES x 32 KB of shared memory plus 1 KB to align the tiles.

#include "common.cuh"
#include "mma.cuh"
#include "moe_gemm.cuh"
#include "wgmma.cuh"

// MOE_WGMMA_STAGES: from TypeScript (moe-plan.ts, through kernel-defines.ts)

// x, w, y, tiles, pairs, topK, N, K: moe.cu's MOE_GEMM_ARGS. grid (ceil(N / outputs), tiles bound), block 256.
template <bool GATE_UP>
__device__ void moe_wgmma(const bf16_t* __restrict__ x, const bf16_t* __restrict__ w, bf16_t* __restrict__ y,
                          const int4* __restrict__ tiles, const int* __restrict__ pairs, int topK, int N, int K) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int WG_BM = 128;   // tokens a block
  constexpr int WG_BN = 128;   // weight rows a block
  constexpr int WG_ROW = 128;  // bytes a staged row: 64 bf16 k
  constexpr int WG_TILE_A = WG_BM * WG_ROW;
  constexpr int WG_STAGE = (WG_BM + WG_BN) * WG_ROW;
  constexpr int OUTPUTS = GATE_UP ? WG_BN / 2 : WG_BN;
  extern __shared__ __align__(16) unsigned char smem[];
  pdl_begin();
  int e, first, count, tok0;
  if (!expert_tile(tiles, blockIdx.y, e, first, count, tok0)) return;
  const int out0 = blockIdx.x * OUTPUTS;
  const unsigned base = (shared_addr(smem) + 1023) & ~1023u;
  const int t = threadIdx.x;
  const int lane = t & 31;
  const int wg = t >> 7;

  // thread t copies 16-byte chunk t % 8 of rows t / 8 + 32 i (i < 4) of the A tile and of the B tile; those rows
  // share their row % 8, so one swizzled offset and constant steps serve all eight copies
  const int j8 = t & 7;
  const int r0 = t >> 3;
  const unsigned dst0 = base + r0 * WG_ROW + 16 * (j8 ^ (r0 & 7));
  const bf16_t* aSrc[4];
  const bf16_t* bSrc[4];
  const bf16_t* we = w + (size_t)e * (GATE_UP ? 2 : 1) * N * K;
#pragma unroll
  for (int i = 0; i < 4; i++) {
    const int r = r0 + 32 * i;
    aSrc[i] = moe_token_row<GATE_UP>(x, pairs, topK, K, first + min(tok0 + r, count - 1)) + 8 * j8;
    const int up = GATE_UP && r >= OUTPUTS ? 1 : 0;  // gate_up: rows OUTPUTS.. are the same outputs' up rows
    bSrc[i] = we + ((size_t)up * N + min(out0 + r - up * OUTPUTS, N - 1)) * K + 8 * j8;
  }
  const int numK = (K + 63) / 64;
  auto load = [&](int kt, int buf) {
    const int k0 = 64 * kt;
    const bool valid = k0 + 8 * j8 < K;
    const int kOff = valid ? k0 : 0;
    const unsigned s = dst0 + buf * WG_STAGE;
#pragma unroll
    for (int i = 0; i < 4; i++) {
      cp_async_16_at(s + i * 32 * WG_ROW, aSrc[i] + kOff, valid);
      cp_async_16_at(s + WG_TILE_A + i * 32 * WG_ROW, bSrc[i] + kOff, valid);
    }
  };
#pragma unroll
  for (int s = 0; s < MOE_WGMMA_STAGES - 1; s++) {
    if (s < numK) load(s, s);
    cp_async_commit();
  }
  float d[64];
#pragma unroll
  for (int i = 0; i < 64; i++) d[i] = 0.f;
  for (int kt = 0; kt < numK; kt++) {
    cp_async_wait<MOE_WGMMA_STAGES - 2>();
    fence_proxy_async_shared();  // this thread's copies, visible to the tensor cores' reads
    __syncthreads();             // everyone's; and every warpgroup's MMA on the buffer refilled below has finished
    const int ahead = kt + MOE_WGMMA_STAGES - 1;
    if (ahead < numK) load(ahead, ahead % MOE_WGMMA_STAGES);
    cp_async_commit();
    const unsigned stage = base + (kt % MOE_WGMMA_STAGES) * WG_STAGE;
    const unsigned long long descA = wgmma_desc(stage + wg * 64 * WG_ROW);
    const unsigned long long descB = wgmma_desc(stage + WG_TILE_A);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 4; kk++) wgmma_m64n128k16_bf16(d, descA + 2 * kk, descB + 2 * kk);  // +32 bytes: k + 16
    wgmma_commit();
    wgmma_wait<0>();
  }
  cp_async_wait<0>();
  // d[4 j + r]: token 64 wg + 16 (warp % 4) + g + 8 (r / 2), weight row 8 j + 2 c + (r % 2) of the block's
  const int tok = tok0 + 64 * wg + 16 * ((t >> 5) & 3) + (lane >> 2);
  const int col = 2 * (lane & 3);
#pragma unroll
  for (int j = 0; j < (GATE_UP ? 8 : 16); j++)
#pragma unroll
    for (int r = 0; r < 4; r++) {
      float v = d[4 * j + r];
      if constexpr (GATE_UP) v = moe_silu_mul(v, d[4 * (j + 8) + r]);
      moe_store(y, v, out0 + 8 * j + col + (r & 1), tok + 8 * (r >> 1), first, count, N);
    }
#else
  __trap();  // built for sm_90a only
#endif
}

#define MOE_WGMMA_ARGS                                                                                                \
  const bf16_t *__restrict__ x, const bf16_t *__restrict__ w, bf16_t *__restrict__ y, const int4 *__restrict__ tiles, \
      const int *__restrict__ pairs, int topK, int N, int K, int sliceChunks
// sliceChunks: unused (the mma.sync builds' argument list, so moe.ts launches either alike)
extern "C" __global__ void __launch_bounds__(256, 2) moe_gate_up_wgmma(MOE_WGMMA_ARGS) {
  moe_wgmma<true>(x, w, y, tiles, pairs, topK, N, K);
}
extern "C" __global__ void __launch_bounds__(256, 2) moe_down_wgmma(MOE_WGMMA_ARGS) {
  moe_wgmma<false>(x, w, y, tiles, pairs, topK, N, K);
}
#undef MOE_WGMMA_ARGS
