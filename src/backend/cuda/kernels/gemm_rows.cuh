// The batch-invariant tensor-core GEMM's building blocks (gemm_rows.cu's contract, stated there): a chunk's two
// mma, a slice's partial, the split variant's slices in shared memory and their ordered sum, and the tiled
// variant's staged main loop; and the split variant's whole tile (gemm_rows_split: gemm_rows.cu's kernels and
// moe.cu's fused router run it). They take the rows they multiply as pointers (or a function giving them) and leave
// the store to the caller, so gemm_rows.cu (rows of one weight and one x) and moe.cu (an expert's rows and the
// tokens routed to it, reached through an index) run the same sums in the same order.
//
// Operands are bf16, or block-FP8 (E = unsigned char: e4m3 bytes, moe.cu's FP8 experts). A chunk is 64 bytes of a
// row either way (a lane's 16-byte piece of four): 32 bf16 k, or 64 e4m3 k as two m16n8k32 e4m3 mma permuted as the
// bf16 ones are (lane (g, c) holds k 16c..16c+15: the first mma takes 16c..16c+7, the second 16c+8..16c+15). FP8's
// contract scales each chunk: its two mma sum from zero to s, joined to the slice's partial as
// p = fma(s, xs * ws, p) (xs the token's scale of the chunk's 128-k group, ws the weight rows' block's:
// chunk_mma_fp8; a chunk's own sum, not a group's, so no second set of accumulators: the split builds' registers are
// full already). Slices are whole groups (an even count of chunks), added in order as bf16's are.
#pragma once
#include "common.cuh"
#include "mma.cuh"

// CHUNK_K, the k of a chunk: from TypeScript (gemm-rows.ts GEMM_ROWS_CHUNK_K, through kernel-defines.ts)

template <typename E>
__device__ __forceinline__ u32x4 load16(const E* p) {
  u32x4 r;
  asm volatile("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
  return r;
}

/** k of a chunk of E (64 bytes of a row: CHUNK_K bf16, twice as many e4m3). */
template <typename E>
__device__ __forceinline__ constexpr int chunk_k() {
  return CHUNK_K * (int)sizeof(bf16_t) / (int)sizeof(E);
}

/** The element type of a row pointer (const E* -> E): tiled_block's operands, read from its rowOf. */
template <typename P>
struct RowElem;
template <typename E>
struct RowElem<const E*> {
  using type = E;
};

/** Lane (g, c)'s 16 bytes of chunk `chunk` for row `row` (zeros past K; K is a multiple of 8, FP8 of 128). */
template <typename E = bf16_t>
__device__ __forceinline__ u32x4 load_chunk(const E* row, int chunk, int K) {
  constexpr int CK = chunk_k<E>();
  const int k = chunk * CK + (CK / 4) * (threadIdx.x & 3);
  if (k >= K) return u32x4{0u, 0u, 0u, 0u};
  return load16(row + k);
}

/**
 * One chunk of the contract: acc[mt][nt] += the chunk's 32 k as two mma, k 8c..8c+3 then 8c+4..8c+7 of lane (g, c)'s
 * 16 bytes. a[mt][h]: weight row g + 8h of m tile mt; b[nt]: token g of n tile nt. Every bf16 variant calls this
 * (chunk_mma_fp8 the FP8 ones: the same words, e4m3 k 16c..16c+7 then 16c+8..16c+15).
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

/**
 * Block-FP8 operands' scales: x's [K / 128, xStride] (input row r's group g at g xStride + r: kernels/quant_fp8.cu's
 * layout), and the weight's, a 128-row block's group g at its row's offset + g.
 */
struct Fp8Scales {
  const float* x;
  const float* w;
  int xStride;
};

/**
 * Where a lane finds its scales in Fp8Scales (unused for bf16): w[mt], m tile mt's block's offset; x[nt][j], the
 * input row of token 2 (lane % 4) + j of n tile nt (the tokens of the lane's accumulators).
 */
template <int MT, int NT>
struct LaneScales {
  int w[MT];
  int x[NT][2];
};

/** One 128-k group's scales of a lane, in registers. */
template <int MT, int NT>
struct GroupScales {
  float w[MT];
  float x[NT][2];
};

template <int MT, int NT>
__device__ __forceinline__ void load_group_scales(GroupScales<MT, NT>& s, const Fp8Scales& f,
                                                  const LaneScales<MT, NT>& l, int g) {
  const float* xg = f.x + (size_t)g * f.xStride;
#pragma unroll
  for (int mt = 0; mt < MT; mt++) s.w[mt] = __ldg(f.w + l.w[mt] + g);
#pragma unroll
  for (int nt = 0; nt < NT; nt++)
#pragma unroll
    for (int j = 0; j < 2; j++) s.x[nt][j] = __ldg(xg + l.x[nt][j]);
}

/** One e4m3 chunk of the FP8 contract: acc[mt][nt] = fma(its two mma from zero, xs * ws, acc), s its group's scales. */
template <int MT, int NT>
__device__ __forceinline__ void chunk_mma_fp8(float acc[MT][NT][4], const u32x4 a[MT][2], const u32x4 b[NT],
                                              const GroupScales<MT, NT>& s) {
#pragma unroll
  for (int mt = 0; mt < MT; mt++) {
    const unsigned lo[4] = {a[mt][0].x, a[mt][1].x, a[mt][0].y, a[mt][1].y};
    const unsigned hi[4] = {a[mt][0].z, a[mt][1].z, a[mt][0].w, a[mt][1].w};
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
      float c[4] = {0.f, 0.f, 0.f, 0.f};
      mma_e4m3_16832(c, lo, b[nt].x, b[nt].y);
      mma_e4m3_16832(c, hi, b[nt].z, b[nt].w);
#pragma unroll
      for (int r = 0; r < 4; r++) acc[mt][nt][r] = __fmaf_rn(c[r], __fmul_rn(s.x[nt][r & 1], s.w[mt]), acc[mt][nt][r]);
    }
  }
}

/**
 * The LaneScales of a warp tile at weight row wmRow and token wnTok of a block's: scaleOf(r) is staged row r's
 * offset in Fp8Scales (rows r < BM weight rows, any of an m tile's 16; then token r - BM's input row), as
 * tiled_block's rowOf gives its data.
 */
template <int MT, int NT, int BM, typename ScaleOf>
__device__ __forceinline__ LaneScales<MT, NT> lane_scales(ScaleOf scaleOf, int wmRow, int wnTok) {
  const int lane = threadIdx.x & 31;
  LaneScales<MT, NT> l;
#pragma unroll
  for (int mt = 0; mt < MT; mt++) l.w[mt] = scaleOf(wmRow + mt * 16);
#pragma unroll
  for (int nt = 0; nt < NT; nt++)
#pragma unroll
    for (int j = 0; j < 2; j++) l.x[nt][j] = scaleOf(BM + wnTok + nt * 8 + 2 * (lane & 3) + j);
  return l;
}

/** tiled_block's scaleOf for bf16 operands: never called. */
struct NoScaleOf {
  __device__ __forceinline__ int operator()(int) const { return 0; }
};

/**
 * acc = this warp's p over chunks [c0, c1): MT x NT tiles, PF chunks loaded before their mma are issued.
 * wRow[mt][h]: weight row g + 8h of m tile mt; xRow[nt]: token g of n tile nt (clamped rows; their outputs
 * are never stored). FP8: c0, c1 and PF even (whole groups), a group's scales loaded with its first chunk.
 */
template <int MT, int NT, int PF, typename E = bf16_t>
__device__ __forceinline__ void slice_partial(float acc[MT][NT][4], const E* const wRow[MT][2],
                                              const E* const xRow[NT], int c0, int c1, int K,
                                              const Fp8Scales& f = {}, const LaneScales<MT, NT>& l = {}) {
  constexpr bool FP8 = sizeof(E) == 1;
  static_assert(!FP8 || PF % 2 == 0, "an FP8 prefetch is whole scale groups");
#pragma unroll
  for (int mt = 0; mt < MT; mt++)
#pragma unroll
    for (int nt = 0; nt < NT; nt++) acc[mt][nt][0] = acc[mt][nt][1] = acc[mt][nt][2] = acc[mt][nt][3] = 0.f;
  for (int cb = c0; cb < c1; cb += PF) {
    u32x4 a[PF][MT][2];
    u32x4 b[PF][NT];
    GroupScales<MT, NT> gs[FP8 ? PF / 2 : 1];
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
        if constexpr (FP8) {
          if (j % 2 == 0) load_group_scales(gs[j / 2], f, l, (cb + j) / 2);
        }
      }
    }
#pragma unroll
    for (int j = 0; j < PF; j++) {
      if constexpr (FP8) {
        if (cb + j < c1) chunk_mma_fp8<MT, NT>(acc, a[j], b[j], gs[j / 2]);
      } else {
        if (cb + j < c1) chunk_mma<MT, NT>(acc, a[j], b[j]);
      }
    }
  }
}

template <typename E = bf16_t>
__device__ __forceinline__ int rows_num_slices(int K, int sliceChunks) {
  constexpr int CK = chunk_k<E>();
  return ((K + CK - 1) / CK + sliceChunks - 1) / sliceChunks;
}

/**
 * The split variant's first half: the block's warps take the tile's slices in turn (slice s to warp s mod warps),
 * each p_s to `partials` (dynamic shared memory, numSlices * MT * NT * 4 * 32 floats), then the block syncs.
 * Element ((mt * NT + nt) * 4 + r) * 32 + lane of slice s is accumulator r of tile (mt, nt) of `lane`.
 */
template <int MT, int NT, int PF, typename E = bf16_t>
__device__ __forceinline__ void split_partials(float* partials, const E* const wRow[MT][2],
                                               const E* const xRow[NT], int K, int sliceChunks,
                                               const Fp8Scales& f = {}, const LaneScales<MT, NT>& l = {}) {
  constexpr int REGS = MT * NT * 4;
  constexpr int CK = chunk_k<E>();
  const int lane = threadIdx.x & 31;
  const int numChunks = (K + CK - 1) / CK;
  const int numSlices = rows_num_slices<E>(K, sliceChunks);
  for (int s = threadIdx.x >> 5; s < numSlices; s += blockDim.x >> 5) {
    float acc[MT][NT][4];
    slice_partial<MT, NT, PF, E>(acc, wRow, xRow, s * sliceChunks, min((s + 1) * sliceChunks, numChunks), K, f, l);
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
      for (int nt = 0; nt < NT; nt++)
#pragma unroll
        for (int r = 0; r < 4; r++) partials[(s * REGS + (mt * NT + nt) * 4 + r) * 32 + lane] = acc[mt][nt][r];
  }
  __syncthreads();
}

/** The split variant's second half: element `e` (split_partials' numbering) summed over the slices in order. */
template <int MT, int NT>
__device__ __forceinline__ float split_sum(const float* partials, int e, int numSlices) {
  constexpr int REGS = MT * NT * 4;
  float sum = partials[e];
  for (int s = 1; s < numSlices; s++) sum = __fadd_rn(sum, partials[s * REGS * 32 + e]);
  return sum;
}

/** 16 bytes at a shared-space address (shared_addr plus an offset, which ptxas folds into the load). */
__device__ __forceinline__ u32x4 lds16_at(unsigned addr) {
  u32x4 r;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
               : "r"(addr) : "memory");
  return r;
}

/**
 * The tiled variant's body for one block: BM = WM * MT * 16 weight rows by BN = WN * NT * 8 tokens, staged two
 * chunks at a time (cp.async, STAGES deep) in dynamic shared memory, STAGES * (BM + BN) * 128 bytes (+ MT * NT * 4
 * floats per thread with SMEM_SUM). rowOf(r) gives staged row r's first element: weight rows r < BM, then token
 * r - BM (every row valid: the caller clamps). finish(wmRow, wnTok, sum) stores: the warp's tile starts at weight row
 * wmRow and token wnTok of the block's, and sum(mt, nt, r) is accumulator r of its tile (mt, nt), the slices summed
 * in order.
 *
 * A stage holds two chunks (128 bytes: 64 bf16 k, or 128 e4m3 k, one FP8 scale group) of the BM weight rows, then
 * of the BN tokens, as eight 16-byte pieces per row, piece q of row r at q ^ 4(r & 1) (rows g and g + 1 of a quarter
 * warp then read different banks). Lane (g, c) reads piece c (chunk 0) and 4 + c (chunk 1) of a row: the fragments
 * the split variant loads from global memory. FP8 (rowOf gives e4m3 rows): scaleOf(r) gives staged row r's offset in
 * `f` (lane_scales), a stage's scales are read as it starts, and each chunk joins the partial with them
 * (chunk_mma_fp8).
 */
template <int WM, int WN, int MT, int NT, int STAGES, bool SMEM_SUM, typename RowOf, typename Finish,
          typename ScaleOf = NoScaleOf>
__device__ __forceinline__ void tiled_block(RowOf rowOf, int K, int sliceChunks, Finish finish, ScaleOf scaleOf = {},
                                            Fp8Scales f = {}) {
  using E = typename RowElem<decltype(rowOf(0))>::type;
  constexpr bool FP8 = sizeof(E) == 1;
  constexpr int CK = chunk_k<E>();
  constexpr int PIECE = CK / 4;  // elements of a 16-byte piece
  constexpr int BM = WM * MT * 16;
  constexpr int BN = WN * NT * 8;
  constexpr int ROWS = BM + BN;
  constexpr int ROW_BYTES = 2 * CHUNK_K * 2;
  constexpr int STAGE_BYTES = ROWS * ROW_BYTES;
  extern __shared__ __align__(16) unsigned char tiles[];
  // Every shared address below is a 32-bit shared-space offset from tiles0 plus a constant, so each copy and load
  // is one instruction with an immediate (the loop issued ~11 instructions a mma before: docs/perf-log.md,
  // session 40). The bytes staged, the fragments and the sums are those of the layout described above.
  const unsigned tiles0 = shared_addr(tiles);
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int wm = warp % WM;
  const int wn = warp / WM;
  const int g = lane >> 2;
  const int numChunks = (K + CK - 1) / CK;
  const int numStages = (numChunks + 1) / 2;

  // Thread t copies piece t % 8 of rows t / 8 + i ROW_STEP of every stage. ROW_STEP is even, so those rows share
  // one swizzle and lie a constant apart; only the last may be clamped to the tile's last row.
  constexpr int THREADS = WM * WN * 32;
  static_assert(THREADS % 16 == 0, "tiled_block: a thread's copied rows must share their parity");
  constexpr int ROW_STEP = THREADS / 8;
  constexpr int LOADS = (ROWS * 8 + THREADS - 1) / THREADS;
  constexpr bool EXACT = (ROWS * 8) % THREADS == 0;
  const int q8 = threadIdx.x & 7;
  const int r0 = threadIdx.x >> 3;
  const E* src[LOADS];
#pragma unroll
  for (int i = 0; i < LOADS; i++) src[i] = rowOf(min(r0 + i * ROW_STEP, ROWS - 1)) + PIECE * q8;
  const unsigned dst0 = tiles0 + r0 * ROW_BYTES + 16 * (q8 ^ ((r0 & 1) << 2));
  const int rLast = min(r0 + (LOADS - 1) * ROW_STEP, ROWS - 1);
  const unsigned dstLast = tiles0 + rLast * ROW_BYTES + 16 * (q8 ^ ((rLast & 1) << 2));
  auto load = [&](int st, int buf) {
    const int k0 = st * 2 * CK;
    const bool valid = k0 + PIECE * q8 < K;
    const int kOff = valid ? k0 : 0;
    const unsigned bufOff = buf * STAGE_BYTES;
#pragma unroll
    for (int i = 0; i < LOADS; i++)
      cp_async_16_at((EXACT || i < LOADS - 1 ? dst0 + i * ROW_STEP * ROW_BYTES : dstLast) + bufOff, src[i] + kOff,
                     valid);
  };
  // Lane (g, c) reads piece 4 half + c of rows of g's parity: swizzled, piece 4 (half ^ (g & 1)) + c.
  const unsigned aRows = tiles0 + (wm * MT * 16 + g) * ROW_BYTES + 16 * (lane & 3);
  const unsigned bRows = tiles0 + (BM + wn * NT * 8 + g) * ROW_BYTES + 16 * (lane & 3);
  auto halfOff = [&](int half) { return 64u * (half ^ (g & 1)); };
#pragma unroll
  for (int s = 0; s < STAGES - 1; s++) {
    if (s < numStages) load(s, s);
    cp_async_commit();
  }
  // the running slice sum: registers, or (SMEM_SUM, for wide warp tiles) this thread's float4 slots after the tiles
  float sumReg[SMEM_SUM ? 1 : MT][SMEM_SUM ? 1 : NT][4];
  float4* sumSmem = reinterpret_cast<float4*>(tiles + STAGES * STAGE_BYTES) + threadIdx.x;
  float acc[MT][NT][4];
  each_acc<MT, NT>([&](int mt, int nt, int r) { acc[mt][nt][r] = 0.f; });
  LaneScales<MT, NT> scales;
  if constexpr (FP8) scales = lane_scales<MT, NT, BM>(scaleOf, wm * MT * 16, wn * NT * 8);
  // the running sum with the slice just finished added (the contract's order): the slice itself when it is the first
  auto fold = [&](bool first) {
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
      for (int nt = 0; nt < NT; nt++) {
        float* a = acc[mt][nt];
        if constexpr (SMEM_SUM) {
          float4& slot = sumSmem[(mt * NT + nt) * THREADS];
          if (first) {
            slot = make_float4(a[0], a[1], a[2], a[3]);
          } else {
            const float4 s = slot;
            slot = make_float4(__fadd_rn(s.x, a[0]), __fadd_rn(s.y, a[1]), __fadd_rn(s.z, a[2]), __fadd_rn(s.w, a[3]));
          }
        } else {
          float* s = sumReg[SMEM_SUM ? 0 : mt][SMEM_SUM ? 0 : nt];
#pragma unroll
          for (int r = 0; r < 4; r++) s[r] = first ? a[r] : __fadd_rn(s[r], a[r]);
        }
#pragma unroll
        for (int r = 0; r < 4; r++) a[r] = 0.f;
      }
  };
  int sliceLeft = sliceChunks;  // chunks until the running slice ends
  bool firstFold = true;
  int readBuf = 0;
  int writeBuf = STAGES - 1;
  for (int st = 0; st < numStages; st++) {
    cp_async_wait<STAGES - 2>();
    __syncthreads();
    if (st + STAGES - 1 < numStages) load(st + STAGES - 1, writeBuf);
    cp_async_commit();
    writeBuf = writeBuf == STAGES - 1 ? 0 : writeBuf + 1;
    const unsigned stageOff = readBuf * STAGE_BYTES;
    readBuf = readBuf == STAGES - 1 ? 0 : readBuf + 1;
    GroupScales<MT, NT> gs;
    if constexpr (FP8) load_group_scales(gs, f, scales, st);
#pragma unroll
    for (int half = 0; half < 2; half++) {
      if (half == 1 && 2 * st + 1 >= numChunks) break;
      if (sliceLeft == 0) {
        fold(firstFold);
        firstFold = false;
        sliceLeft = sliceChunks;
      }
      sliceLeft--;
      // every fragment of the chunk first: the shared loads are ordered asm, so an mma placed between them
      // would wait for each in turn (loading the stage's second chunk's fragments before the first's mma measured
      // 6.5% slower on a3b's prefill: 238 registers; docs/perf-log.md, session 40)
      const unsigned a0 = aRows + stageOff + halfOff(half);
      const unsigned b0 = bRows + stageOff + halfOff(half);
      u32x4 b[NT], a[MT][2];
#pragma unroll
      for (int nt = 0; nt < NT; nt++) b[nt] = lds16_at(b0 + nt * 8 * ROW_BYTES);
#pragma unroll
      for (int mt = 0; mt < MT; mt++) {
        a[mt][0] = lds16_at(a0 + mt * 16 * ROW_BYTES);
        a[mt][1] = lds16_at(a0 + (mt * 16 + 8) * ROW_BYTES);
      }
      if constexpr (FP8) chunk_mma_fp8<MT, NT>(acc, a, b, gs);
      else chunk_mma<MT, NT>(acc, a, b);
    }
  }
  cp_async_wait<0>();
  const bool oneSlice = numChunks <= sliceChunks;
  const float* sumFloats = reinterpret_cast<const float*>(sumSmem);
  finish(wm * MT * 16, wn * NT * 8, [&](int mt, int nt, int r) {
    if (oneSlice) return acc[mt][nt][r];
    if constexpr (SMEM_SUM) return __fadd_rn(sumFloats[(mt * NT + nt) * THREADS * 4 + r], acc[mt][nt][r]);
    else return __fadd_rn(sumReg[SMEM_SUM ? 0 : mt][SMEM_SUM ? 0 : nt][r], acc[mt][nt][r]);
  });
}

/** The weight row (within a tile of 16) and token (within a tile of 8) of accumulator register r of `lane`. */
__device__ __forceinline__ int acc_row(int lane, int r) { return (lane >> 2) + ((r & 2) ? 8 : 0); }
__device__ __forceinline__ int acc_tok(int lane, int r) { return 2 * (lane & 3) + (r & 1); }

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
  const int row = row0 + mt * 16 + acc_row(lane, r);
  const int tok = tok0 + nt * 8 + acc_tok(lane, r);
  if (row < N && tok < T) y[(size_t)tok * N + row] = from_float<bf16_t>(bias ? v + to_float(bias[row]) : v);
}

// grid (ceil(N / 16MT), ceil(T / 8NT)), block: warps sharing the tile; dynamic shared memory
// numSlices * MT * NT * 4 * 32 floats.
template <int MT, int NT, int PF>
__device__ void gemm_rows_split(const bf16_t* __restrict__ x, const bf16_t* __restrict__ w, bf16_t* __restrict__ y,
                                const bf16_t* __restrict__ bias, int T, int N, int K, int sliceChunks) {
  extern __shared__ float partials[];
  const int row0 = blockIdx.x * MT * 16;
  const int tok0 = blockIdx.y * NT * 8;
  const bf16_t* wRow[MT][2];
  const bf16_t* xRow[NT];
  tile_rows<MT, NT>(x, w, row0, tok0, T, N, K, wRow, xRow);
  split_partials<MT, NT, PF>(partials, wRow, xRow, K, sliceChunks);
  const int numSlices = rows_num_slices(K, sliceChunks);
  for (int e = threadIdx.x; e < MT * NT * 4 * 32; e += blockDim.x) {
    const int i = e >> 5;
    store_out(y, bias, split_sum<MT, NT>(partials, e, numSlices), row0, tok0, i / (NT * 4), (i >> 2) % NT, i & 3,
              e & 31, T, N);
  }
}
