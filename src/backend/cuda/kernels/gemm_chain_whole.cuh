// gemm_chain.cu's chain_whole (the gemm_chain_whole builds): the chains of gemm_chain for weights too narrow to keep
// every SM streaming in 16-row tiles. Included by gemm_chain.cu after its fragment and norm helpers, which it uses.
#pragma once
#include "common.cuh"

// gemm_chain_whole: the same chains for weights too narrow to keep every SM streaming in 16-row tiles (qwen3-0.6b's o
// and down, 1,024 rows), which cuBLASLt ran: a warp takes 8 weight rows and reads all of them (8 x K) into shared
// memory before waiting for the kernel before, so only its tokens' loads and the K / 16 mma of its chain follow the
// wait. The roles swap: the weights are the mma's B (n8: 8 rows a warp, twice the warps of 16-row tiles), the tokens
// its A (m16: rows 0..T-1; rows from T read row T-1, rows 8-15 are zero, and their outputs are dropped). Each output
// is still one chain over the k16 groups in natural order from zero: the same products and sums, so cuBLASLt's bits.
// The _split build, a block of SPLIT warps (blockDim.x / 32, gemm-chain.ts), splits the 8 rows' k into SPLIT equal
// slices of whole stages instead, warp j the j-th: each slice one chain from zero, warp 0 adding the slices' sums in
// slice order. Long chains are what a one-token step waits on (qwen3-0.6b's down: 192 mma), so the split shortens it
// SPLIT-fold; its bits are that order's, not cuBLASLt's (gemm-chain.ts takes it only for K beyond the demo model's).
// Shared: weights [K / 64 stages][8 rows][8 pieces], then tokens [stages][T rows][8 pieces], each row's pieces
// XOR-swizzled by row; each warp's tokens arrive in CHAIN_WHOLE_GROUPS groups of its stages, its chain starting on
// the first.
// launch: grid (N / 8), block 32 (gemm_chain_whole) or 32 SPLIT (gemm_chain_whole_split, 2 <= SPLIT <=
// CHAIN_WHOLE_MAX_SPLIT), shared K / 64 * (64 + 8 T) * 16 bytes
// CHAIN_WHOLE_MAX_SPLIT, the most warps a block splits k between: from TypeScript (gemm-chain.ts, kernel-defines.ts)
#define CHAIN_WHOLE_GROUPS 4
template <bool SPLIT>
__device__ __forceinline__ void chain_whole(const bf16_t* __restrict__ x, const bf16_t* __restrict__ w,
                                            bf16_t* __restrict__ y, const bf16_t* __restrict__ bias, int T, int N,
                                            int K, ChainNormOut nout = {}) {
  extern __shared__ u32x4 chainShared[];
  const int lane = threadIdx.x & 31, part = SPLIT ? threadIdx.x >> 5 : 0, split = SPLIT ? blockDim.x >> 5 : 1;
  const int steps = K / 64 / split, first = part * steps, row0 = blockIdx.x * 8;
  u32x4* ws = chainShared;
  u32x4* xs = chainShared + (K / 64) * 64;
  // piece p: stage p / 64, row (p / 8) % 8, piece p % 8
  for (int p = first * 64 + lane; p < (first + steps) * 64; p += 32) {
    const int r = (p >> 3) & 7, col = p & 7, row = row0 + r;
    cp_async_16_stream(ws + (p & ~7) + (col ^ r), w + (size_t)min(row, N - 1) * K + (p >> 6) * 64 + col * 8, row < N);
  }
  cp_async_commit();
  // a producer's norm (ChainNormOut): warp 0's rows' norm weights before the wait, their residual right after it
  const int tok = lane >> 2;  // C registers 0, 1: token lane / 4, weight rows 2 (lane % 4) and the next
  float gw[2] = {0.f, 0.f};
  unsigned short res[2] = {0, 0};
  if (nout.residual && part == 0) {
#pragma unroll
    for (int r = 0; r < 2; r++) gw[r] = to_float(nout.w[min(row0 + 2 * (lane & 3) + r, N - 1)]);
  }
  pdl_begin();
  if (nout.residual && part == 0) {
#pragma unroll
    for (int r = 0; r < 2; r++) {
      const int row = row0 + 2 * (lane & 3) + r;
      if (row < N && tok < T) res[r] = nout.residual[(size_t)tok * N + row].bits;
    }
  }
  const int per = (steps + CHAIN_WHOLE_GROUPS - 1) / CHAIN_WHOLE_GROUPS, rowPieces = 8 * T;
#pragma unroll
  for (int g = 0; g < CHAIN_WHOLE_GROUPS; g++) {
    const int end = (first + min(steps, (g + 1) * per)) * rowPieces;
    // stage p / 8T, token (p / 8) % T, piece p % 8
    for (int p = (first + g * per) * rowPieces + lane; p < end; p += 32) {
      const int s = p / rowPieces, r = (p >> 3) - s * T, col = p & 7;
      cp_async_16(xs + (p & ~7) + (col ^ (r & 7)), x + (size_t)r * K + s * 64 + col * 8, true);
    }
    cp_async_commit();
  }
  // A and B alike (x4, two k16 at once): lanes 8j..8j+7 address token rows 0-7 (A; rows from T read row T-1) and
  // weight rows 0-7 (B) at piece j of the pair's four. A's rows 8-15 are zero: one ldmatrix serves two k16 of A, so
  // an mma waits on fewer of them. The addresses are 32-bit shared-space ones stepped per stage: 64-bit generic pointer
  // math in the loop holds each ldmatrix, and so the chain, back (docs/perf-log.md, session 21).
  const int br = lane & 7, bq = lane >> 3, ar = min(br, T - 1);
  const unsigned wAddr = shared_addr(ws + br * 8), xAddr = shared_addr(xs + ar * 8);  // this lane's rows
  float c[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
  for (int g = 0; g < CHAIN_WHOLE_GROUPS; g++) {
    if (g == 0) cp_async_wait<CHAIN_WHOLE_GROUPS - 1>();  // the weights and the first group of tokens
    else if (g == 1) cp_async_wait<CHAIN_WHOLE_GROUPS - 2>();
    else if (g == 2) cp_async_wait<CHAIN_WHOLE_GROUPS - 3>();
    else cp_async_wait<0>();
    __syncwarp();
    const int end = first + min(steps, (g + 1) * per);
#pragma unroll 2
    for (int s = first + g * per; s < end; s++) {
      const unsigned wslot = wAddr + s * 64 * 16, xslot = xAddr + s * rowPieces * 16;
#pragma unroll
      for (int pair = 0; pair < 2; pair++) {
        unsigned a[4], b[4];
        ldmatrix_x4_at(b, wslot + ((4 * pair + bq) ^ br) * 16);
        ldmatrix_x4_at(a, xslot + ((4 * pair + bq) ^ (ar & 7)) * 16);
#pragma unroll
        for (int h = 0; h < 2; h++) {
          const unsigned af[4] = {a[2 * h], 0u, a[2 * h + 1], 0u};
          mma_bf16_16816(c, af, b[2 * h], b[2 * h + 1]);
        }
      }
    }
  }
  if constexpr (SPLIT) {  // the slices' sums added in slice order by warp 0
    __shared__ float slices[CHAIN_WHOLE_MAX_SPLIT - 1][32][2];  // warps 1.. : their slice's sums (registers 0, 1)
    if (part > 0) {
      slices[part - 1][lane][0] = c[0];
      slices[part - 1][lane][1] = c[1];
    }
    __syncthreads();
    if (part > 0) return;
    for (int j = 0; j < split - 1; j++) {
      c[0] += slices[j][lane][0];
      c[1] += slices[j][lane][1];
    }
  }
  // registers 0, 1: token lane / 4, weight rows 2 (lane % 4) and the next; 2, 3: tokens 8+ (none)
  float sq = 0.f;
#pragma unroll
  for (int r = 0; r < 2; r++) {
    const int row = row0 + 2 * (lane & 3) + r;
    if (row < N && tok < T) {
      const size_t at = (size_t)tok * N + row;
      const float out = bias ? c[r] + to_float(bias[row]) : c[r];
      if (nout.residual) {
        const float nr = norm_add(nout.residual, at, res[r], out);
        y[at] = from_float<bf16_t>(nr * gw[r]);
        sq = __fmaf_rn(nr, nr, sq);
      } else {
        y[at] = from_float<bf16_t>(out);
      }
    }
  }
  if (nout.residual) {  // a token's 8 rows are 4 neighbouring lanes' (the first of them writes their sum)
    sq += __shfl_xor_sync(FULL_MASK, sq, 1);
    sq += __shfl_xor_sync(FULL_MASK, sq, 2);
    if ((lane & 3) == 0 && tok < T) nout.parts[(size_t)tok * gridDim.x + blockIdx.x] = sq;
  }
}
static_assert(CHAIN_WHOLE_GROUPS == 4, "gemm_chain_whole's waits name each group");
