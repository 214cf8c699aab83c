// Mixture of experts after its router (Backend.moeExperts), all on the device with no read back to the host, so a
// decode step's graph replays it whatever the tokens choose: every grid depends on T, E, topK, I and H alone.
//
//   moe_router_fused  (small T) logits [T, E] = x router^T as gemm_rows' split tiles, then, in the grid's last block
//                to finish, moe_route's and moe_group's work on them: one launch for the router, route and group
//   moe_route    logits [T, E] bf16 -> per row softmax (f32), top k by repeated argmax (ties to the lower expert),
//                optionally renormalized -> experts [T * k] int32, weights [T * k] f32 (pair = t * k + j); each
//                expert written as this rank's local slot (LocalMap), -1 for one it does not hold (expert parallel)
//   moe_group    one block: per-expert counts -> offsets [EL + 1] (exclusive scan) over the EL local experts, the
//                pairs grouped by expert (pairs [P]), each pair's grouped position (pos [P], -1 for a pair of
//                expert -1: in no group), and each GEMM's tile list (expert_tile)
//   moe_gate_up_* act[p] = silu(x[t] . gate_e) * (x[t] . up_e) for grouped position p of pair (t, e) -> [P, I]
//   moe_down_*   y[p] = act[p] . down_e -> [P, H], grouped order
//   moe_combine  out[t] = sum over j in order of w[t k + j] * y[pos[t k + j]] in f32 (pos -1: skipped), rounded
//                once -> [T, H]
//   moe_combine_add_rms_norm  residual[t] += that row, rounded; out[t] = rmsnorm(residual[t]) * w: add_rms_norm's
//                bits on moe_combine's output (norm.cuh's row body), one launch and no [T, H] round trip fewer
//
// The two GEMMs are gemm_rows' (gemm_rows.cuh) on an expert's rows, with its contract: what an output sums, and in
// what order, depends on K alone, so a token's outputs never depend on how many tokens share its expert, which tile
// they fall in, or the order moe_group's atomics put them in (it is not deterministic, and need not be). Their blocks
// walk a list of tiles: expert by expert, its tokens in tiles of BN, written by moe_group (one entry a block: no block
// searches the offsets), the grid's y a bound on the tiles of any routing (moe-plan.ts); blocks past the last tile
// exit after one load. gate_up's warp tiles hold gate rows in their
// first half of m tiles and the same outputs' up rows in the second, so silu(gate) * up is taken from registers.
//
// Block-FP8 experts (the _fp8 builds: e4m3 weights with an f32 scale a 128 x 128 block, uploadFp8Block's layout) are
// vLLM's W8A8, as src/backend/fp8-linear.ts (the CPU backend's reference) computes them: the GEMMs take e4m3 rows of
// their input quantized per token and 128 columns by kernels/quant_fp8.cu (scales [K / 128, rows], a row's group g at
// g xStride + row), x before gate_up and act before down. gate_up's output is act in f32, unrounded, as the CPU's
// silu_mul leaves it, so both quantize the same values. Their sums are gemm_rows.cuh's FP8 contract (a scale group
// from zero on the tensor cores' e4m3 mma, joined to its slice with both scales; slices of whole groups in order), so
// a token's outputs depend on K alone, as the bf16 builds'. Prompt chunks run the tiled builds on e4m3 tiles as
// they are (mma m16n8k32 e4m3, sm_89+): a stage of 128 bytes a row is one scale group, half a bf16 stage's k in
// bytes, so the same tiles and shared memory take twice the k and no dequantization pass; decode runs the split
// builds, each routed expert's e4m3 bytes read once for all its tokens in a tile.
#include "gemm_rows.cuh"
#include "norm.cuh"
#include "moe_gemm.cuh"

// From TypeScript (kernel-defines.ts): CHUNK_K, GEMM_ROWS_SPLIT_WARPS, MOE_ROUTE_WARPS, MOE_ROUTE_PER_LANE (experts a
// lane of moe_route holds: E <= 32 MOE_ROUTE_PER_LANE), MOE_GROUP_THREADS, MOE_COMBINE_THREADS, NORM_VEC
// (norm.cuh), FP8_BLOCK, MOE_FP8_SPLIT_WARPS (the _fp8 split builds' most warps: fewer than bf16's, so that a thread
// has the registers its scales take), and the build lists.
static_assert(4 * CHUNK_K == FP8_BLOCK, "an FP8 scale group is two chunks of 64 e4m3 k (gemm_rows.cuh)");

// ---- routing ----

#include "moe_route.cuh"

// grid ceil(T / MOE_ROUTE_WARPS), block 32 MOE_ROUTE_WARPS: a warp a row.
extern "C" __global__ void __launch_bounds__(MOE_ROUTE_WARPS * 32) moe_route(const bf16_t* __restrict__ logits,
    int* __restrict__ topExperts, float* __restrict__ topWeights, int T, int E, int topK, int renormalize,
    int localFirst, int localStride, int localCount) {
  pdl_begin();
  const int t = blockIdx.x * MOE_ROUTE_WARPS + (threadIdx.x >> 5);
  if (t < T) route_row(logits, topExperts, topWeights, t, E, topK, renormalize, LocalMap{localFirst, localStride, localCount});
}

// grid 1, block MOE_GROUP_THREADS, dynamic shared memory 3 E + 2 ints. One block: P = T k is at most a few tens of
// thousands, a few shared atomics a thread. tilesA, tilesB: the gate_up and down GEMMs' tile lists (TileList).
extern "C" __global__ void __launch_bounds__(MOE_GROUP_THREADS) moe_group(const int* __restrict__ topExperts,
    int* __restrict__ offsets, int* __restrict__ pairs, int* __restrict__ pos, int P, int E, int4* tilesA, int bnA,
    int entriesA, int4* tilesB, int bnB, int entriesB) {
  extern __shared__ int cursor[];
  pdl_begin();
  group_pairs(topExperts, offsets, pairs, pos, P, E, cursor, TileList{tilesA, bnA, entriesA},
              TileList{tilesB, bnB, entriesB});
}

// grid (ceil(E / 16), ceil(T / 8)), block 32 min(GEMM_ROWS_SPLIT_WARPS, slices of H); dynamic shared memory
// gemm_rows_split<1, 1>'s numSlices * 4 * 32 floats, then 3 localCount + 2 ints (moe_group's). `done`: a counter that is 0 before the launch, and
// after it (the last block resets it, so a graph replays it). The logits are gemm_rows_split_m1_n1's bits (the
// batch-invariant mode's router GEMM at any T: its contract), rounded to bf16 as every router GEMM's are; the routing
// and grouping are moe_route's and moe_group's, by the last block to finish once every logit is in memory. For the
// few rows of a decode step: one launch instead of three, the router's weight read once by E / 16 blocks.
extern "C" __global__ void __launch_bounds__(GEMM_ROWS_SPLIT_WARPS * 32) moe_router_fused(
    const bf16_t* __restrict__ x, const bf16_t* __restrict__ router, bf16_t* logits, int* topExperts,
    float* __restrict__ topWeights, int* __restrict__ offsets, int* __restrict__ pairs, int* __restrict__ pos,
    unsigned* done, int T, int E, int H, int sliceChunks, int topK, int renormalize, int4* tilesA, int bnA,
    int entriesA, int4* tilesB, int bnB, int entriesB, int localFirst, int localStride, int localCount) {
  extern __shared__ float fusedShared[];  // gemm_rows_split's partials (its own name for the same bytes), the cursor
  __shared__ bool last;
  pdl_begin();
  gemm_rows_split<1, 1, 4>(x, router, logits, nullptr, T, E, H, sliceChunks);
  // the classic last-block pattern: each block's logits visible device-wide before it counts itself done
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(done, 1u) == gridDim.x * gridDim.y - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  const int warps = blockDim.x >> 5;
  const LocalMap local{localFirst, localStride, localCount};
  for (int t = threadIdx.x >> 5; t < T; t += warps) route_row(logits, topExperts, topWeights, t, E, topK, renormalize, local);
  __syncthreads();  // this block's topExperts, for every thread of it
  group_pairs(topExperts, offsets, pairs, pos, T * topK, localCount,
              reinterpret_cast<int*>(fusedShared + rows_num_slices(H, sliceChunks) * 4 * 32),
              TileList{tilesA, bnA, entriesA}, TileList{tilesB, bnB, entriesB});
  if (threadIdx.x == 0) *done = 0u;
}

// ---- the grouped GEMMs ----

// x: gate_up, the hidden states [T, K = H] (a grouped position's token through pairs); down, act [P, K = I] in grouped
// order (pairs unused). w: the experts' stacked rows (gate_up [E 2N, K], gate rows then up rows an expert; down
// [E N, K]). y: [P, N] in grouped order (N = I for gate_up, H for down).
#define MOE_GEMM_ARGS                                                                                                 \
  const bf16_t *__restrict__ x, const bf16_t *__restrict__ w, bf16_t *__restrict__ y, const int4 *__restrict__ tiles, \
      const int *__restrict__ pairs, int topK, int N, int K, int sliceChunks
// The _fp8 builds: x and w e4m3, y f32 (gate_up's act) or bf16 (down's), and the scales (MoeScales).
#define MOE_FP8_GEMM_ARGS                                                                                            \
  const unsigned char *__restrict__ x, const unsigned char *__restrict__ w, void *__restrict__ y,                    \
      const int4 *__restrict__ tiles, const int *__restrict__ pairs, int topK, int N, int K, int sliceChunks,        \
      const float *__restrict__ xScales, const float *__restrict__ wScales, int xStride, int wStride

/**
 * An _fp8 build's scales: x's [K / 128, xStride] (quant_fp8.cu: row r's group g at g xStride + r, r the token for
 * gate_up, the grouped position for down), w's [E rows / 128, wStride] (uploadFp8Block: row-major, rows padded).
 */
struct MoeScales {
  const float* x;
  const float* w;
  int xStride, wStride;
};

/** The offset in sc.w of stacked weight row `row`'s block's scales (_fp8 builds). */
__device__ __forceinline__ int moe_weight_scales(MoeScales sc, int row) {
  return row / FP8_BLOCK * sc.wStride;
}

// grid (ceil(N / 16), tiles bound), block: warps sharing the tile's slices; dynamic shared memory numSlices * MT * NT *
// 4 * 32 floats. A block's 16 outputs: gate_up, m tile 0 their gate rows and m tile 1 their up rows. E: bf16_t, or
// unsigned char (e4m3, with `sc`); Y: the output's type.
template <bool GATE_UP, int NT, int PF, typename E = bf16_t, typename Y = bf16_t>
__device__ void moe_split(const E* __restrict__ x, const E* __restrict__ w, Y* __restrict__ y,
                          const int4* __restrict__ tiles, const int* __restrict__ pairs, int topK, int N, int K,
                          int sliceChunks, MoeScales sc = {}) {
  constexpr int MT = GATE_UP ? 2 : 1;
  extern __shared__ float partials[];
  pdl_begin();
  int e, first, count, tok0;
  if (!expert_tile(tiles, blockIdx.y, e, first, count, tok0)) return;
  const int g = (threadIdx.x & 31) >> 2;
  const int out0 = blockIdx.x * 16;
  const E* wRow[MT][2];
  const E* xRow[NT];
#pragma unroll
  for (int mt = 0; mt < MT; mt++)
#pragma unroll
    for (int h = 0; h < 2; h++) wRow[mt][h] = w + ((size_t)(e * MT + mt) * N + min(out0 + g + 8 * h, N - 1)) * K;
#pragma unroll
  for (int nt = 0; nt < NT; nt++) xRow[nt] = moe_token_row<GATE_UP>(x, pairs, topK, K, first + min(tok0 + nt * 8 + g, count - 1));
  LaneScales<MT, NT> scales;
  if constexpr (sizeof(E) == 1) {
    // m tile mt's rows (e MT + mt) N + out0.. lie in one 128-row block (N a multiple of 128)
    scales = lane_scales<MT, NT, MT * 16>([&](int r) {
      if (r < MT * 16) return moe_weight_scales(sc, (e * MT + r / 16) * N + out0);
      return moe_token_index<GATE_UP>(pairs, topK, first + min(tok0 + r - MT * 16, count - 1));
    }, 0, 0);
  }
  split_partials<MT, NT, PF, E>(partials, wRow, xRow, K, sliceChunks, Fp8Scales{sc.x, sc.w, sc.xStride}, scales);
  const int numSlices = rows_num_slices<E>(K, sliceChunks);
  // j: an m tile 0 element (split_partials' numbering); its m tile 1 twin is NT * 4 * 32 further
  for (int j = threadIdx.x; j < NT * 4 * 32; j += blockDim.x) {
    const int lane = j & 31;
    const int r = (j >> 5) & 3;
    const int nt = j >> 7;
    float v = split_sum<MT, NT>(partials, j, numSlices);
    if constexpr (GATE_UP) v = moe_silu_mul(v, split_sum<MT, NT>(partials, j + NT * 4 * 32, numSlices));
    moe_store(y, v, out0 + acc_row(lane, r), tok0 + nt * 8 + acc_tok(lane, r), first, count, N);
  }
}

// grid (ceil(N / (WM HALF 16)), tiles bound), block WM x WN warps, dynamic shared memory as tiled_block says. A warp's
// HALF m tiles of outputs: gate_up, its m tiles 0..HALF-1 their gate rows and HALF..MT-1 their up rows. E, Y, sc: as
// moe_split's.
template <bool GATE_UP, int WM, int WN, int MT, int NT, int STAGES, bool SMEM_SUM, typename E = bf16_t,
          typename Y = bf16_t>
__device__ void moe_tiled(const E* __restrict__ x, const E* __restrict__ w, Y* __restrict__ y,
                          const int4* __restrict__ tiles, const int* __restrict__ pairs, int topK, int N, int K,
                          int sliceChunks, MoeScales sc = {}) {
  static_assert(!GATE_UP || MT % 2 == 0, "gate_up pairs a warp's gate and up m tiles");
  constexpr int HALF = GATE_UP ? MT / 2 : MT;
  constexpr int BM = WM * MT * 16;
  pdl_begin();
  int e, first, count, tok0;
  if (!expert_tile(tiles, blockIdx.y, e, first, count, tok0)) return;
  const int out0 = blockIdx.x * WM * HALF * 16;
  const int lane = threadIdx.x & 31;
  const E* we = w + (size_t)e * (GATE_UP ? 2 : 1) * N * K;
  // _fp8: staged row r's offset in the scales (tiled_block's rowOf, as scales): an m tile's 16 rows lie in one block
  auto scaleOf = [&](int r) {
    if (r >= BM) return moe_token_index<GATE_UP>(pairs, topK, first + min(tok0 + r - BM, count - 1));
    const int mt = (r % (MT * 16)) / 16;
    const int out = out0 + (r / (MT * 16)) * HALF * 16 + (mt % HALF) * 16;
    return moe_weight_scales(sc, e * (GATE_UP ? 2 : 1) * N + (mt >= HALF ? N : 0) + min(out, N - 1));
  };
  tiled_block<WM, WN, MT, NT, STAGES, SMEM_SUM>(
      [&](int r) {
        if (r >= BM) return moe_token_row<GATE_UP>(x, pairs, topK, K, first + min(tok0 + r - BM, count - 1));
        const int mt = (r % (MT * 16)) / 16;
        const int out = out0 + (r / (MT * 16)) * HALF * 16 + (mt % HALF) * 16 + r % 16;
        return we + ((size_t)(mt >= HALF ? N : 0) + min(out, N - 1)) * K;
      },
      K, sliceChunks, [&](int wmRow, int wnTok, auto sum) {
        const int warpOut0 = out0 + (wmRow / (MT * 16)) * HALF * 16;
#pragma unroll
        for (int mt = 0; mt < HALF; mt++)
#pragma unroll
          for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int r = 0; r < 4; r++) {
              float v = sum(mt, nt, r);
              if constexpr (GATE_UP) v = moe_silu_mul(v, sum(mt + HALF, nt, r));
              moe_store(y, v, warpOut0 + mt * 16 + acc_row(lane, r), tok0 + wnTok + nt * 8 + acc_tok(lane, r), first,
                        count, N);
            }
      }, scaleOf, Fp8Scales{sc.x, sc.w, sc.xStride});
}

#define INSTANTIATE_SPLIT(NAME, GATE_UP, MT, NT, PF)                                                                   \
  extern "C" __global__ void __launch_bounds__(GEMM_ROWS_SPLIT_WARPS * 32) moe_##NAME##_split_m##MT##_n##NT(          \
      MOE_GEMM_ARGS) {                                                                                                 \
    moe_split<GATE_UP, NT, PF>(x, w, y, tiles, pairs, topK, N, K, sliceChunks);                                   \
  }
#define INSTANTIATE_TILED(NAME, GATE_UP, WM, WN, MT, NT, STAGES, SMEM_SUM)                                             \
  extern "C" __global__ void __launch_bounds__(WM * WN * 32, 1) moe_##NAME##_tiled_w##WM##x##WN##_m##MT##_n##NT(       \
      MOE_GEMM_ARGS) {                                                                                                 \
    moe_tiled<GATE_UP, WM, WN, MT, NT, STAGES, SMEM_SUM>(x, w, y, tiles, pairs, topK, N, K, sliceChunks);         \
  }
#define MOE_FP8_CALL_ARGS(Y) \
  x, w, static_cast<Y*>(y), tiles, pairs, topK, N, K, sliceChunks, MoeScales{xScales, wScales, xStride, wStride}
#define INSTANTIATE_SPLIT_FP8(NAME, GATE_UP, Y, MT, NT, PF)                                                           \
  extern "C" __global__ void __launch_bounds__(MOE_FP8_SPLIT_WARPS * 32) moe_##NAME##_fp8_split_m##MT##_n##NT(        \
      MOE_FP8_GEMM_ARGS) {                                                                                             \
    moe_split<GATE_UP, NT, PF, unsigned char, Y>(MOE_FP8_CALL_ARGS(Y));                                                \
  }
#define INSTANTIATE_TILED_FP8(NAME, GATE_UP, Y, WM, WN, MT, NT, STAGES, SMEM_SUM)                                      \
  extern "C" __global__ void __launch_bounds__(WM * WN * 32, 1) moe_##NAME##_fp8_tiled_w##WM##x##WN##_m##MT##_n##NT(   \
      MOE_FP8_GEMM_ARGS) {                                                                                             \
    moe_tiled<GATE_UP, WM, WN, MT, NT, STAGES, SMEM_SUM, unsigned char, Y>(MOE_FP8_CALL_ARGS(Y));                      \
  }
#define SPLIT_GATE_UP(MT, NT, PF) INSTANTIATE_SPLIT(gate_up, true, MT, NT, PF)
#define SPLIT_DOWN(MT, NT, PF) INSTANTIATE_SPLIT(down, false, MT, NT, PF)
#define TILED_GATE_UP(WM, WN, MT, NT, STAGES, SMEM_SUM) INSTANTIATE_TILED(gate_up, true, WM, WN, MT, NT, STAGES, SMEM_SUM)
#define TILED_DOWN(WM, WN, MT, NT, STAGES, SMEM_SUM) INSTANTIATE_TILED(down, false, WM, WN, MT, NT, STAGES, SMEM_SUM)
#define SPLIT_GATE_UP_FP8(MT, NT, PF) INSTANTIATE_SPLIT_FP8(gate_up, true, float, MT, NT, PF)
#define SPLIT_DOWN_FP8(MT, NT, PF) INSTANTIATE_SPLIT_FP8(down, false, bf16_t, MT, NT, PF)
#define TILED_GATE_UP_FP8(WM, WN, MT, NT, STAGES, SMEM_SUM) \
  INSTANTIATE_TILED_FP8(gate_up, true, float, WM, WN, MT, NT, STAGES, SMEM_SUM)
#define TILED_DOWN_FP8(WM, WN, MT, NT, STAGES, SMEM_SUM) \
  INSTANTIATE_TILED_FP8(down, false, bf16_t, WM, WN, MT, NT, STAGES, SMEM_SUM)

// The builds: moe-plan.ts MOE_SPLIT_BUILDS and gemm-rows.ts's tiled variants, as X-macro lists (kernel-defines.ts),
// bf16 and _fp8 alike.
MOE_GATE_UP_SPLIT_BUILDS(SPLIT_GATE_UP)
MOE_DOWN_SPLIT_BUILDS(SPLIT_DOWN)
MOE_TILED_BUILDS(TILED_GATE_UP)
MOE_TILED_BUILDS(TILED_DOWN)
MOE_GATE_UP_SPLIT_BUILDS(SPLIT_GATE_UP_FP8)
MOE_DOWN_SPLIT_BUILDS(SPLIT_DOWN_FP8)
MOE_TILED_BUILDS(TILED_GATE_UP_FP8)
MOE_TILED_BUILDS(TILED_DOWN_FP8)
#undef MOE_GEMM_ARGS
#undef MOE_FP8_GEMM_ARGS
#undef MOE_FP8_CALL_ARGS
#undef INSTANTIATE_SPLIT
#undef INSTANTIATE_TILED
#undef INSTANTIATE_SPLIT_FP8
#undef INSTANTIATE_TILED_FP8
#undef SPLIT_GATE_UP
#undef SPLIT_DOWN
#undef TILED_GATE_UP
#undef TILED_DOWN
#undef SPLIT_GATE_UP_FP8
#undef SPLIT_DOWN_FP8
#undef TILED_GATE_UP_FP8
#undef TILED_DOWN_FP8

// ---- combine ----

/**
 * Row t's combined outputs by column: sum over j in order of w[t k + j] * y[pos[t k + j]] (fma in f32), each rounded to
 * bf16 once (moe_combine's store); a pos of -1 (an expert another rank holds) adds nothing. A norm.cuh Add source:
 * moe_combine_add_rms_norm adds it to the residual. The k choices are read MOE_COMBINE_BATCH at a time
 * (QUIRE_MOE_COMBINE_BATCH): their positions and weights, then their rows, then the sums in order, so a batch costs
 * two memory latencies where one choice at a time costs two each; the same sums in the same order either way. With
 * `early` (moe_combine_add_rms_norm), the first MOE_COMBINE_EARLY choices come from registers, read before the
 * kernel's wait (combine_choices), and all their rows are loaded before any is summed: one latency after the wait.
 */
constexpr int MOE_COMBINE_EARLY = 8;
struct CombineChoices {
  int p[MOE_COMBINE_EARLY];  // -1: past top k, or an expert another rank holds
  float w[MOE_COMBINE_EARLY];
};

/**
 * Row t's first MOE_COMBINE_EARLY positions and weights, read before the combine's PDL wait. moe_group (or
 * moe_router_fused) and moe_route wrote them at least two kernels before it: the kernel before the combine (down)
 * lets it launch only after down's own wait, which returns once gate_up (or its quantize), and so the routing before
 * it, has finished. Read at L2 (ld.global.cg), where those writes are: an L1 line of an earlier layer's is never used.
 */
__device__ __forceinline__ CombineChoices combine_choices(const int* pos, const float* weights, int t, int topK) {
  CombineChoices c;
#pragma unroll
  for (int j = 0; j < MOE_COMBINE_EARLY; j++) {
    const bool in = j < topK;
    c.p[j] = in ? __ldcg(pos + (size_t)t * topK + j) : -1;
    c.w[j] = in ? __ldcg(weights + (size_t)t * topK + j) : 0.f;
  }
  return c;
}

struct CombineRow {
  const bf16_t* y;
  const int* pos;
  const float* weights;
  int topK, H, t;
  bool hasEarly = false;
  CombineChoices early = {};
  __device__ __forceinline__ void operator()(int h, float* f) const {
    float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    int from = 0;
    if (hasEarly) {
      u32x4 v[MOE_COMBINE_EARLY];
#pragma unroll
      for (int b = 0; b < MOE_COMBINE_EARLY; b++) {
        v[b] = early.p[b] >= 0 ? *reinterpret_cast<const u32x4*>(y + (size_t)early.p[b] * H + h) : u32x4{0u, 0u, 0u, 0u};
      }
#pragma unroll
      for (int b = 0; b < MOE_COMBINE_EARLY; b++) {
        if (early.p[b] < 0) continue;
        const unsigned words[4] = {v[b].x, v[b].y, v[b].z, v[b].w};
#pragma unroll
        for (int i = 0; i < 4; i++) {
          acc[2 * i] = __fmaf_rn(early.w[b], __uint_as_float(words[i] << 16), acc[2 * i]);
          acc[2 * i + 1] = __fmaf_rn(early.w[b], __uint_as_float(words[i] & 0xffff0000u), acc[2 * i + 1]);
        }
      }
      from = MOE_COMBINE_EARLY;
    }
    for (int j0 = from; j0 < topK; j0 += MOE_COMBINE_BATCH) {
      int p[MOE_COMBINE_BATCH];
      float wj[MOE_COMBINE_BATCH];
      u32x4 v[MOE_COMBINE_BATCH];
#pragma unroll
      for (int b = 0; b < MOE_COMBINE_BATCH; b++) {
        const bool in = j0 + b < topK;
        p[b] = in ? pos[(size_t)t * topK + j0 + b] : -1;
        wj[b] = in ? weights[(size_t)t * topK + j0 + b] : 0.f;
      }
#pragma unroll
      for (int b = 0; b < MOE_COMBINE_BATCH; b++) {
        v[b] = p[b] >= 0 ? *reinterpret_cast<const u32x4*>(y + (size_t)p[b] * H + h) : u32x4{0u, 0u, 0u, 0u};
      }
#pragma unroll
      for (int b = 0; b < MOE_COMBINE_BATCH; b++) {
        if (p[b] < 0) continue;
        const unsigned words[4] = {v[b].x, v[b].y, v[b].z, v[b].w};
#pragma unroll
        for (int i = 0; i < 4; i++) {
          acc[2 * i] = __fmaf_rn(wj[b], __uint_as_float(words[i] << 16), acc[2 * i]);
          acc[2 * i + 1] = __fmaf_rn(wj[b], __uint_as_float(words[i] & 0xffff0000u), acc[2 * i + 1]);
        }
      }
    }
#pragma unroll
    for (int i = 0; i < 8; i++) f[i] = to_float(from_float<bf16_t>(acc[i]));
  }
};

// grid (ceil(H / (8 MOE_COMBINE_THREADS)), T), block MOE_COMBINE_THREADS: a thread 8 columns of a row (H % 8 == 0).
extern "C" __global__ void __launch_bounds__(MOE_COMBINE_THREADS) moe_combine(const bf16_t* __restrict__ y,
    const int* __restrict__ pos, const float* __restrict__ weights, bf16_t* __restrict__ out, int topK, int H) {
  pdl_begin();
  const int t = blockIdx.y;
  const int h = (blockIdx.x * blockDim.x + threadIdx.x) * 8;
  if (h >= H) return;
  float f[8];
  CombineRow{y, pos, weights, topK, H, t}(h, f);
  store8(out + (size_t)t * H + h, f);
}

// grid T, block gemm.ts normThreads(H) (add_rms_norm_bf16's, so the sums of squares fall alike); H % 8 == 0 and
// H <= 8 blockDim NORM_VEC (norm_fast: the host checks). add_rms_norm_bf16 with moe_combine's row as its x.
extern "C" __global__ void moe_combine_add_rms_norm(const bf16_t* __restrict__ y, const int* __restrict__ pos,
    const float* __restrict__ weights, int topK, bf16_t* residual, const bf16_t* __restrict__ w,
    bf16_t* __restrict__ out, int H, float eps) {
  pdl_trigger_if(NORM_TRIGGER_EARLY);
  float wf[NORM_VEC][8];
  norm_weights_fast(w, H, wf);
  const int t = blockIdx.x;
  const CombineChoices early = combine_choices(pos, weights, t, topK);
  pdl_wait_then_trigger(NORM_TRIGGER_EARLY);
  const CombineRow add{y, pos, weights, topK, H, t, true, early};
  const size_t at = (size_t)t * H;
  norm_row_fast(&add, residual + at, residual + at, nullptr, w, out + at, H, eps, wf);
}
