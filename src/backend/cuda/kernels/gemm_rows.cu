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
#include "common.cuh"
#include "mma.cuh"

// CHUNK_K, the k of a chunk: from TypeScript (gemm-rows.ts GEMM_ROWS_CHUNK_K, through kernel-defines.ts)

__device__ __forceinline__ u32x4 load16(const bf16_t* p) {
  u32x4 r;
  asm volatile("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
  return r;
}

/** Lane (g, c)'s 8 k of chunk `chunk` for row `row` (zeros past K; K is a multiple of 8). */
__device__ __forceinline__ u32x4 load_chunk(const bf16_t* row, int chunk, int K) {
  const int k = chunk * CHUNK_K + 8 * (threadIdx.x & 3);
  if (k >= K) return u32x4{0u, 0u, 0u, 0u};
  return load16(row + k);
}

/**
 * One chunk of the contract: acc[mt][nt] += the chunk's 32 k as two mma, k 8c..8c+3 then 8c+4..8c+7 of lane (g, c)'s
 * 16 bytes. a[mt][h]: weight row g + 8h of m tile mt; b[nt]: token g of n tile nt. Every variant calls this.
 */
template <int MT, int NT>
__device__ __forceinline__ void chunk_mma(float acc[MT][NT][4], const u32x4 a[MT][2], const u32x4 b[NT]) {
#pragma unroll
  for (int mt = 0; mt < MT; mt++) {
    const unsigned lo[4] = {a[mt][0].x, a[mt][1].x, a[mt][0].y, a[mt][1].y};
    const unsigned hi[4] = {a[mt][0].z, a[mt][1].z, a[mt][0].w, a[mt][1].w};
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
      mma_bf16_16816(acc[mt][nt], lo, b[nt].x, b[nt].y);
      mma_bf16_16816(acc[mt][nt], hi, b[nt].z, b[nt].w);
    }
  }
}

/**
 * acc = this warp's p over chunks [c0, c1): MT x NT tiles, PF chunks loaded before their mma are issued.
 * wRow[mt][h]: weight row g + 8h of m tile mt; xRow[nt]: token g of n tile nt (clamped rows; their outputs
 * are never stored).
 */
template <int MT, int NT, int PF>
__device__ __forceinline__ void slice_partial(float acc[MT][NT][4], const bf16_t* const wRow[MT][2],
                                              const bf16_t* const xRow[NT], int c0, int c1, int K) {
#pragma unroll
  for (int mt = 0; mt < MT; mt++)
#pragma unroll
    for (int nt = 0; nt < NT; nt++) acc[mt][nt][0] = acc[mt][nt][1] = acc[mt][nt][2] = acc[mt][nt][3] = 0.f;
  for (int cb = c0; cb < c1; cb += PF) {
    u32x4 a[PF][MT][2];
    u32x4 b[PF][NT];
#pragma unroll
    for (int j = 0; j < PF; j++) {
      if (cb + j < c1) {
#pragma unroll
        for (int mt = 0; mt < MT; mt++) {
          a[j][mt][0] = load_chunk(wRow[mt][0], cb + j, K);
          a[j][mt][1] = load_chunk(wRow[mt][1], cb + j, K);
        }
#pragma unroll
        for (int nt = 0; nt < NT; nt++) b[j][nt] = load_chunk(xRow[nt], cb + j, K);
      }
    }
#pragma unroll
    for (int j = 0; j < PF; j++) {
      if (cb + j < c1) chunk_mma<MT, NT>(acc, a[j], b[j]);
    }
  }
}

/** Row pointers of lane (g, c) for the tile at weight row `row0`, token `tok0`. */
template <int MT, int NT>
__device__ __forceinline__ void tile_rows(const bf16_t* x, const bf16_t* w, int row0, int tok0, int T, int N, int K,
                                          const bf16_t* wRow[MT][2], const bf16_t* xRow[NT]) {
  const int g = (threadIdx.x & 31) >> 2;
#pragma unroll
  for (int mt = 0; mt < MT; mt++)
#pragma unroll
    for (int h = 0; h < 2; h++) wRow[mt][h] = w + (size_t)min(row0 + mt * 16 + g + 8 * h, N - 1) * K;
#pragma unroll
  for (int nt = 0; nt < NT; nt++) xRow[nt] = x + (size_t)min(tok0 + nt * 8 + g, T - 1) * K;
}

/** Stores accumulator register r of tile (mt, nt) held by `lane` (plus its row's bias, if any), if inside y. */
__device__ __forceinline__ void store_out(bf16_t* y, const bf16_t* bias, float v, int row0, int tok0, int mt, int nt,
                                          int r, int lane, int T, int N) {
  const int row = row0 + mt * 16 + (lane >> 2) + ((r & 2) ? 8 : 0);
  const int tok = tok0 + nt * 8 + 2 * (lane & 3) + (r & 1);
  if (row < N && tok < T) y[(size_t)tok * N + row] = from_float<bf16_t>(bias ? v + to_float(bias[row]) : v);
}

// grid (ceil(N / 16MT), ceil(T / 8NT)), block: warps sharing the tile; dynamic shared memory
// numSlices * MT * NT * 4 * 32 floats.
template <int MT, int NT, int PF>
__device__ void gemm_rows_split(const bf16_t* __restrict__ x, const bf16_t* __restrict__ w, bf16_t* __restrict__ y,
                                const bf16_t* __restrict__ bias, int T, int N, int K, int sliceChunks) {
  extern __shared__ float partials[];
  constexpr int REGS = MT * NT * 4;
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int numWarps = blockDim.x >> 5;
  const int row0 = blockIdx.x * MT * 16;
  const int tok0 = blockIdx.y * NT * 8;
  const int numChunks = (K + CHUNK_K - 1) / CHUNK_K;
  const int numSlices = (numChunks + sliceChunks - 1) / sliceChunks;
  const bf16_t* wRow[MT][2];
  const bf16_t* xRow[NT];
  tile_rows<MT, NT>(x, w, row0, tok0, T, N, K, wRow, xRow);
  for (int s = warp; s < numSlices; s += numWarps) {
    float acc[MT][NT][4];
    slice_partial<MT, NT, PF>(acc, wRow, xRow, s * sliceChunks, min((s + 1) * sliceChunks, numChunks), K);
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
      for (int nt = 0; nt < NT; nt++)
#pragma unroll
        for (int r = 0; r < 4; r++) partials[(s * REGS + (mt * NT + nt) * 4 + r) * 32 + lane] = acc[mt][nt][r];
  }
  __syncthreads();
  for (int e = threadIdx.x; e < REGS * 32; e += blockDim.x) {
    float sum = partials[e];
    for (int s = 1; s < numSlices; s++) sum = __fadd_rn(sum, partials[s * REGS * 32 + e]);
    const int i = e >> 5;
    store_out(y, bias, sum, row0, tok0, i / (NT * 4), (i >> 2) % NT, i & 3, e & 31, T, N);
  }
}

__device__ __forceinline__ u32x4 lds16(const unsigned char* p) {
  u32x4 r;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
               : "r"(shared_addr(p)) : "memory");
  return r;
}

/** fn(mt, nt, r) over a warp tile's MT x NT x 4 accumulators. */
template <int MT, int NT, typename Fn>
__device__ __forceinline__ void each_acc(Fn fn) {
#pragma unroll
  for (int mt = 0; mt < MT; mt++)
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
#pragma unroll
      for (int r = 0; r < 4; r++) fn(mt, nt, r);
}

// grid (ceil(N / BM), ceil(T / BN)), block WM x WN warps, dynamic shared memory STAGES * (BM + BN) * 128 bytes
// (+ MT * NT * 4 floats per thread with SMEM_SUM).
// A stage holds two chunks (64 k, 128 bytes) of BM weight rows, then of BN tokens, as eight 16-byte pieces per
// row, piece q of row r at q ^ 4(r & 1) (rows g and g + 1 of a quarter warp then read different banks). Lane
// (g, c) reads piece c (chunk 0) and 4 + c (chunk 1) of a row: the fragments the split variant loads from global
// memory.
template <int WM, int WN, int MT, int NT, int STAGES, bool SMEM_SUM>
__device__ void gemm_rows_tiled(const bf16_t* __restrict__ x, const bf16_t* __restrict__ w, bf16_t* __restrict__ y,
                                const bf16_t* __restrict__ bias, int T, int N, int K, int sliceChunks) {
  constexpr int BM = WM * MT * 16;
  constexpr int BN = WN * NT * 8;
  constexpr int ROWS = BM + BN;
  constexpr int ROW_BYTES = 2 * CHUNK_K * 2;
  extern __shared__ __align__(16) unsigned char tiles[];
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int wm = warp % WM;
  const int wn = warp / WM;
  const int g = lane >> 2;
  const int row0 = blockIdx.x * BM;
  const int tok0 = blockIdx.y * BN;
  const int numChunks = (K + CHUNK_K - 1) / CHUNK_K;
  const int numStages = (numChunks + 1) / 2;

  // each thread copies the same LOADS pieces (row, piece) of every stage: their sources computed once
  constexpr int THREADS = WM * WN * 32;
  constexpr int LOADS = (ROWS * 8 + THREADS - 1) / THREADS;
  // (THREADS is a multiple of 8, so a thread's piece q is the same in every row it copies)
  const int q8 = threadIdx.x & 7;
  const bf16_t* src[LOADS];
#pragma unroll
  for (int i = 0; i < LOADS; i++) {
    const int r = min((int)threadIdx.x + i * THREADS, ROWS * 8 - 1) >> 3;
    src[i] = (r < BM ? w + (size_t)min(row0 + r, N - 1) * K : x + (size_t)min(tok0 + r - BM, T - 1) * K) + 8 * q8;
  }
  auto load = [&](int st, int buf) {
    const int k0 = st * 2 * CHUNK_K;
    const bool valid = k0 + 8 * q8 < K;
#pragma unroll
    for (int i = 0; i < LOADS; i++) {
      const int r = min((int)threadIdx.x + i * THREADS, ROWS * 8 - 1) >> 3;
      cp_async_16(tiles + (buf * ROWS + r) * ROW_BYTES + 16 * (q8 ^ ((r & 1) << 2)), src[i] + (valid ? k0 : 0), valid);
    }
  };
  auto piece = [&](const unsigned char* stage, int r, int q) { return lds16(stage + r * ROW_BYTES + 16 * (q ^ ((r & 1) << 2))); };
#pragma unroll
  for (int s = 0; s < STAGES - 1; s++) {
    if (s < numStages) load(s, s);
    cp_async_commit();
  }
  // the running slice sum: registers, or (SMEM_SUM, for wide warp tiles) this thread's slots after the tiles
  float sumReg[SMEM_SUM ? 1 : MT][SMEM_SUM ? 1 : NT][4];
  float* sumSmem = reinterpret_cast<float*>(tiles + STAGES * ROWS * ROW_BYTES) + threadIdx.x;
  auto sumAt = [&](int mt, int nt, int r) -> float& {
    if constexpr (SMEM_SUM) return sumSmem[((mt * NT + nt) * 4 + r) * THREADS];
    else return sumReg[SMEM_SUM ? 0 : mt][SMEM_SUM ? 0 : nt][r];
  };
  float acc[MT][NT][4];
  each_acc<MT, NT>([&](int mt, int nt, int r) { acc[mt][nt][r] = 0.f; });
  // the running sum with the slice just finished added (the contract's order): the slice itself when it is the first
  auto folded = [&](int mt, int nt, int r, bool first) {
    return first ? acc[mt][nt][r] : __fadd_rn(sumAt(mt, nt, r), acc[mt][nt][r]);
  };
  for (int st = 0; st < numStages; st++) {
    cp_async_wait<STAGES - 2>();
    __syncthreads();
    if (st + STAGES - 1 < numStages) load(st + STAGES - 1, (st + STAGES - 1) % STAGES);
    cp_async_commit();
    const unsigned char* stage = tiles + (st % STAGES) * ROWS * ROW_BYTES;
#pragma unroll
    for (int half = 0; half < 2; half++) {
      const int c = 2 * st + half;
      if (c >= numChunks) break;
      if (c > 0 && c % sliceChunks == 0) {
        each_acc<MT, NT>([&](int mt, int nt, int r) {
          sumAt(mt, nt, r) = folded(mt, nt, r, c == sliceChunks);
          acc[mt][nt][r] = 0.f;
        });
      }
      // every fragment of the chunk first: the shared loads are ordered asm, so an mma placed between them
      // would wait for each in turn
      const int q = 4 * half + (lane & 3);
      u32x4 b[NT], a[MT][2];
#pragma unroll
      for (int nt = 0; nt < NT; nt++) b[nt] = piece(stage, BM + wn * NT * 8 + nt * 8 + g, q);
#pragma unroll
      for (int mt = 0; mt < MT; mt++) {
        a[mt][0] = piece(stage, wm * MT * 16 + mt * 16 + g, q);
        a[mt][1] = piece(stage, wm * MT * 16 + mt * 16 + g + 8, q);
      }
      chunk_mma<MT, NT>(acc, a, b);
    }
  }
  cp_async_wait<0>();
  each_acc<MT, NT>([&](int mt, int nt, int r) {
    store_out(y, bias, folded(mt, nt, r, numChunks <= sliceChunks), row0 + wm * MT * 16, tok0 + wn * NT * 8, mt, nt,
              r, lane, T, N);
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
