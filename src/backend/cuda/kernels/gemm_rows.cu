// y[T, N] = x[T, K] * w[N, K]^T (bf16 in and out, fp32 accumulation on tensor cores), batch-invariant by
// construction: what an output element adds, and in what order, depends on K alone. The GEMM of the
// batch-invariant mode (--batch-invariant); the default path runs cuBLASLt, which is faster.
//
// The order (the contract every variant below keeps):
//   - k is cut into chunks of 32 and the chunks into slices of `sliceChunks` (the host picks it from K);
//   - a slice's partial p_s is an mma.sync m16n8k16 chain from zero over its chunks in order, a chunk being
//     two mma over its 32 k permuted as in chunk_mma (lane (g, c) holds k 8c..8c+7: the first mma takes
//     8c..8c+3, the second 8c+4..8c+7, in the A and B fragments alike);
//   - y = (((p_0 + p_1) + p_2) + ...) in fp32, rounded to bf16 once.
// The tile a warp computes (MT x 16 weight rows by NT x 8 tokens), how many warps share a tile's slices, and the
// grid are free per launch: none of them changes a sum. The weight rows are the mma's M side ("swap AB"), so a
// step of one token wastes 7/8 of an n8 tile, not 15/16 of an m16 one.
//
// Two variants:
//   split: a block's warps share one tile and take its slices in turn, loading fragments straight from global
//          memory; each p_s goes to shared memory and the block adds them in slice order. Many warps per weight
//          tile: for small T, where the weights' bytes in flight decide the time.
//   tiled: a warp walks its tile's slices in order, keeping the running sum in registers (or, SMEM_SUM, in its
//          own shared-memory slots, so wide warp tiles fit the registers); the block's weight and token tiles
//          are staged two chunks at a time in shared memory (cp.async, STAGES deep) and shared by its WM x WN
//          warps: for large T, where the arithmetic decides.
// Their building blocks live in gemm_rows.cuh, shared with the grouped (mixture-of-experts) GEMMs of moe.cu.
#include "gemm_rows.cuh"

// gemm_rows_split: gemm_rows.cuh (moe.cu's fused router runs it too).

// grid (ceil(N / BM), ceil(T / BN)), block WM x WN warps, dynamic shared memory as tiled_block says.
template <int WM, int WN, int MT, int NT, int STAGES, bool SMEM_SUM>
__device__ void gemm_rows_tiled(const bf16_t* __restrict__ x, const bf16_t* __restrict__ w, bf16_t* __restrict__ y,
                                const bf16_t* __restrict__ bias, int T, int N, int K, int sliceChunks) {
  constexpr int BM = WM * MT * 16;
  const int row0 = blockIdx.x * BM;
  const int tok0 = blockIdx.y * WN * NT * 8;
  const int lane = threadIdx.x & 31;
  tiled_block<WM, WN, MT, NT, STAGES, SMEM_SUM>(
      [&](int r) { return r < BM ? w + (size_t)min(row0 + r, N - 1) * K : x + (size_t)min(tok0 + r - BM, T - 1) * K; },
      K, sliceChunks, [&](int wmRow, int wnTok, auto sum) {
        each_acc<MT, NT>([&](int mt, int nt, int r) {
          store_out(y, bias, sum(mt, nt, r), row0 + wmRow, tok0 + wnTok, mt, nt, r, lane, T, N);
        });
      });
}

#define GEMM_ROWS_ARGS                                                                                                 \
  const bf16_t *__restrict__ x, const bf16_t *__restrict__ w, bf16_t *__restrict__ y, const bf16_t *__restrict__ bias, \
      int T, int N, int K, int sliceChunks
#define INSTANTIATE_SPLIT(MT, NT, PF)                                                                                  \
  extern "C" __global__ void __launch_bounds__(GEMM_ROWS_SPLIT_WARPS * 32) gemm_rows_split_m##MT##_n##NT(             \
      GEMM_ROWS_ARGS) {                                                                                                \
    gemm_rows_split<MT, NT, PF>(x, w, y, bias, T, N, K, sliceChunks);                                                  \
  }

#define INSTANTIATE_TILED(WM, WN, MT, NT, STAGES, SMEM_SUM)                                                            \
  extern "C" __global__ void __launch_bounds__(WM * WN * 32, 1) gemm_rows_tiled_w##WM##x##WN##_m##MT##_n##NT(          \
      GEMM_ROWS_ARGS) {                                                                                                \
    gemm_rows_tiled<WM, WN, MT, NT, STAGES, SMEM_SUM>(x, w, y, bias, T, N, K, sliceChunks);                            \
  }

// The builds: gemm-rows.ts GEMM_ROWS_VARIANTS, the list its plans pick from, as X-macro lists (kernel-defines.ts);
// GEMM_ROWS_SPLIT_WARPS, a split block's most warps, from there too.
GEMM_ROWS_SPLIT_BUILDS(INSTANTIATE_SPLIT)
GEMM_ROWS_TILED_BUILDS(INSTANTIATE_TILED)
#undef GEMM_ROWS_ARGS
#undef INSTANTIATE_SPLIT
#undef INSTANTIATE_TILED
