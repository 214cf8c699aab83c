// Every layer of a one-token decode step in one persistent kernel: the batch-invariant mode's single stream
// (--batch-invariant, a step of one decode token), experimental and opt-in (QUIRE_FUSED_DECODE=1): so far it is
// slower than the layer-by-layer kernels it fuses (docs/perf-log.md, session 6). A layer is six stages of one grid
// (qkv, qk-norm + rope + kv write, attention, o, gate_up + silu, down) between grid-wide barriers instead of
// nine kernels.
//
// Bits: every stage runs the op path's own device functions on the same inputs with the same block shape
// (128 threads), so a step's output is bit for bit that of the mode's op-by-op step:
//   - the norms (norm.cu) run in every block, into its shared memory, as the prologue of the GEMM that reads
//     them; block 0 alone writes the new residual, to the other of two buffers (the others still read the old);
//   - the GEMMs keep gemm_rows.cu's contract (32-k chunks through chunk_mma, slices of slice_chunks(K) chunks
//     each a chain from zero, slices added in order in fp32, one rounding): each warp streams a contiguous run of
//     (16-row tile, slice) items and publishes their partials; the warp that completes a tile's count adds its
//     slices in order and stores the tile;
//   - qk_norm_rope (rope.cu) and attention_decode (attention_decode.cu) run as virtual blocks given their own
//     coordinates (the attention's split plan follows kv length alone, whatever the grid); silu_mul_of
//     (activation.cu) is the gate_up GEMM's epilogue, of its bf16 outputs, as silu_mul takes them.
// Those functions spell out every rounding, so inlining them here cannot contract them differently.
// GPU test fused-decode: the same logits bits as the op path, step after step.
//
// Barrier: counters[0] (zeroed before each launch) gets 1 from every block at every barrier; a block waits
// until it reaches gridDim.x times the barriers passed. The grid must be co-resident: the host launches at most
// FUSED_BLOCKS_PER_SM blocks per SM, and no more than its occupancy query says fit.
//
// Shapes: res0 = the embedding rows [hidden] (the residual in); res1 [hidden] (the residual out, after an odd
//   number of updates); scratch: qkv [(H + 2 KVH) D] | attn [H D] | o [hidden] | silu(gate) * up [I] | mlp [hidden];
//   layers [numLayers][LAYER_PTRS] device pointers; gemmPartials [most items][16 (x2 for gate_up)] f32;
//   counters [32 + most tiles] int32 zeroed; partialOut, partialMl, rowCounters as attention_decode's;
//   timeline null, or [6 numLayers barriers][gridDim.x][arrival, release] u64 (QUIRE_FUSED_TIMELINE=1).
// Launch: decode_layers_d<D>_g<G> grid (up to FUSED_BLOCKS_PER_SM x SMs), block 128, dynamic shared hidden * 2
//   bytes (rounded up to 16) + MK_WARPS * GEMV_RING_BYTES; I a multiple of 16 (gate and up tiles pair up).
#define QUIRE_DEVICE_ONLY
#include "common.cuh"
#include "mma.cuh"
#include "norm.cu"
#include "activation.cu"
#include "rope.cu"
#include "attention_decode.cu"
#include "gemm_rows.cu"

#define MK_THREADS 128
#define MK_WARPS (MK_THREADS / 32)
/** Blocks per SM (the host's grid is this many per SM): more warps keep more weight bytes in flight. */
#define FUSED_BLOCKS_PER_SM 2
/** Shared memory per warp for its GEMM stream (cp.async ring). */
#define GEMV_RING_BYTES (16 * 1024)
/** Tile counters start here in `counters`; the barrier counter has its own 128 bytes. */
#define MK_TILE_COUNTERS 32

#define LP_INPUT_NORM 0
#define LP_QKV 1
#define LP_Q_NORM 2
#define LP_K_NORM 3
#define LP_O 4
#define LP_POST_NORM 5
#define LP_GATE_UP 6
#define LP_DOWN 7
#define LP_K_CACHE 8
#define LP_V_CACHE 9
#define LAYER_PTRS 10

/** gemm_rows' chunks per slice for K (sliceChunks in gemm-rows.ts). */
__device__ __forceinline__ int slice_chunks(int K) {
  const int chunks = (K + CHUNK_K - 1) / CHUNK_K;
  return max(8, (chunks + 15) / 16);
}

__device__ __forceinline__ unsigned ld_acquire(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
  return t;
}

/**
 * Every block of the grid gets here before any goes on; what they wrote before is then visible to all. With a
 * timeline, thread 0 stamps its arrival and its release (globaltimer ns) at [barrier][block][2].
 */
__device__ __forceinline__ void grid_sync(unsigned* counter, unsigned& target, unsigned long long* timeline) {
  target += gridDim.x;
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned long long* at =
        timeline ? timeline + 2 * ((size_t)(target / gridDim.x - 1) * gridDim.x + blockIdx.x) : nullptr;
    if (at) at[0] = global_ns();
    __threadfence();
    atomicAdd(counter, 1u);
    while (ld_acquire(counter) < target) {
    }
    __threadfence();
    if (at) at[1] = global_ns();
  }
  __syncthreads();
}

/** What a GEMM stage stores for row `row`: y[row] = v[0] (MT 1), or silu(gate) * up of the bf16 v[0], v[1] (MT 2). */
template <int MT>
__device__ __forceinline__ void store_row(bf16_t* y, int row, const float* v) {
  if (MT == 1) {
    y[row] = from_float<bf16_t>(v[0]);
  } else {
    y[row] = from_float<bf16_t>(silu_mul_of(from_float<bf16_t>(v[0]), from_float<bf16_t>(v[1])));
  }
}

/**
 * Counts `count` published slices of `tile`; the warp that completes the tile adds its slices in order (as the
 * split variant does), stores its rows and puts the counter back to 0.
 */
template <int MT>
__device__ __forceinline__ void count_slices(int tile, int count, int numSlices, int N, bf16_t* y,
                                             const float* partials, int* counters) {
  const int lane = threadIdx.x & 31;
  __threadfence();
  __syncwarp();
  int last = 0;
  if (lane == 0) {
    last = atomicAdd(counters + tile, count) + count == numSlices;
    if (last) counters[tile] = 0;
  }
  if (!__shfl_sync(FULL_MASK, last, 0)) return;
  __threadfence();
  if (lane < 16 && tile * 16 + lane < N) {
    const float* q = partials + (size_t)tile * numSlices * 16 * MT + lane;
    float v[MT];
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
      v[mt] = __ldcg(q + mt * 16);
      for (int z = 1; z < numSlices; z++) v[mt] = __fadd_rn(v[mt], __ldcg(q + (z * MT + mt) * 16));
    }
    store_row<MT>(y, tile * 16 + lane, v);
  }
}

/**
 * y = w x for the one token x, under gemm_rows' contract. The items (16-row tile, slice), tile by tile, are cut
 * into one contiguous run per warp of the grid. A warp streams its run's chunks through a ring of GEMV_RING_BYTES
 * in shared memory (cp.async, each lane its own 16-byte pieces, so no lane waits for another), computes each
 * slice's partial as chunk_mma's chain from zero, publishes it (token 0's sums) in partials[tile][slice], and
 * counts a tile's published slices once per tile it touches (count_slices). x is in shared memory, or
 * (X_GLOBAL) in global memory, written by other blocks before the last barrier, streamed with the weights.
 * MT 2 (gate_up, N = I): an item takes gate tile p (rows 16p..) and up tile p (rows I + 16p..), and y[16p..] gets
 * silu(gate) * up, as silu_mul computes it from the bf16 gate_up outputs.
 */
template <int MT, bool X_GLOBAL>
__device__ __noinline__ void gemv(const bf16_t* __restrict__ w, int N, int K, const bf16_t* x, bf16_t* y,
                                  float* partials, int* counters, u32x4* ring) {
  constexpr int PIECES = 2 * MT + (X_GLOBAL ? 1 : 0);  // 16-byte pieces per lane per chunk
  constexpr int STAGES = GEMV_RING_BYTES / (PIECES * 32 * 16);
  const int lane = threadIdx.x & 31;
  const int g = lane >> 2;
  const int kLane = 8 * (lane & 3);
  const int sliceChunks = slice_chunks(K);
  const int numChunks = (K + CHUNK_K - 1) / CHUNK_K;
  const int numSlices = (numChunks + sliceChunks - 1) / sliceChunks;
  const long long numItems = (long long)(N + 15) / 16 * numSlices;
  const int numWarps = gridDim.x * MK_WARPS;
  const int warpId = blockIdx.x * MK_WARPS + (threadIdx.x >> 5);
  const int i0 = (int)(numItems * warpId / numWarps), i1 = (int)(numItems * (warpId + 1) / numWarps);
  if (i0 >= i1) return;
  u32x4* lanes = ring + lane;  // piece i of stage st at lanes[(st * PIECES + i) * 32]

  // the load cursor runs ahead of the compute cursor through the same (item, chunk) sequence
  int ldItem = i0, ldChunk = (i0 % numSlices) * sliceChunks, issued = 0;
  auto issue = [&]() {
    if (ldItem < i1) {
      const int tile = ldItem / numSlices;
      const int k = ldChunk * CHUNK_K + kLane;
      const bool valid = k < K;
      u32x4* st = lanes + (issued % STAGES) * PIECES * 32;
#pragma unroll
      for (int mt = 0; mt < MT; mt++) {
#pragma unroll
        for (int h = 0; h < 2; h++) {
          const int row = mt * N + min(tile * 16 + g + 8 * h, N - 1);
          cp_async_16(st + (mt * 2 + h) * 32, w + (size_t)row * K + (valid ? k : 0), valid);
        }
      }
      if (X_GLOBAL) cp_async_16(st + 2 * MT * 32, x + (valid ? k : 0), valid);
      const int s = ldItem % numSlices;
      if (++ldChunk == min((s + 1) * sliceChunks, numChunks)) {
        ldItem++;
        ldChunk = (ldItem % numSlices) * sliceChunks;
      }
    }
    cp_async_commit();  // empty groups past the end keep the wait count uniform
    issued++;
  };
#pragma unroll 1
  for (int i = 0; i < STAGES - 1; i++) issue();

  int consumed = 0, runTile = -1, runCount = 0;
  for (int item = i0; item < i1; item++) {
    const int tile = item / numSlices, s = item - tile * numSlices;
    float acc[MT][1][4];
#pragma unroll
    for (int mt = 0; mt < MT; mt++) acc[mt][0][0] = acc[mt][0][1] = acc[mt][0][2] = acc[mt][0][3] = 0.f;
    const int c1 = min((s + 1) * sliceChunks, numChunks);
    for (int chunk = s * sliceChunks; chunk < c1; chunk++) {
      issue();
      cp_async_wait<STAGES - 1>();
      const u32x4* st = lanes + (consumed % STAGES) * PIECES * 32;
      u32x4 a[MT][2];
#pragma unroll
      for (int mt = 0; mt < MT; mt++) {
        a[mt][0] = st[(mt * 2) * 32];
        a[mt][1] = st[(mt * 2 + 1) * 32];
      }
      u32x4 b[1];
      if (X_GLOBAL) {
        b[0] = st[2 * MT * 32];
      } else {
        const int k = chunk * CHUNK_K + kLane;
        b[0] = k < K ? *reinterpret_cast<const u32x4*>(x + k) : u32x4{0u, 0u, 0u, 0u};
      }
      chunk_mma<MT, 1>(acc, a, b);
      consumed++;
    }
    if (tile != runTile) {
      if (runTile >= 0) count_slices<MT>(runTile, runCount, numSlices, N, y, partials, counters);
      runTile = tile;
      runCount = 0;
    }
    float* p = partials + ((size_t)tile * numSlices + s) * 16 * MT;
    if ((lane & 3) == 0) {
#pragma unroll
      for (int mt = 0; mt < MT; mt++) {
        p[mt * 16 + g] = acc[mt][0][0];
        p[mt * 16 + g + 8] = acc[mt][0][2];
      }
    }
    runCount++;
  }
  count_slices<MT>(runTile, runCount, numSlices, N, y, partials, counters);
  cp_async_wait<0>();
}

// Stages as functions of their own (not inlined): each gets the registers it needs instead of the whole kernel
// carrying every stage's at once (spills).

/** xs = the normed row (norm.cu's row function), resOut = res + add where given. */
__device__ __noinline__ void norm_stage(const bf16_t* add, const bf16_t* res, bf16_t* resOut, const bf16_t* x,
                                        const bf16_t* w, bf16_t* xs, int hidden, float eps) {
  norm_row_fast(add, res, resOut, x, w, xs, hidden, eps);
  __syncthreads();
}

/** qk norm + rope + k, v into the cache: virtual blocks (0, y) of qk_norm_rope's grid, round the grid. */
__device__ __noinline__ void rope_stage(bf16_t* qkv, const bf16_t* qNorm, const bf16_t* kNorm, int applyNorm,
                                        const float* invFreq, const int* positions, bf16_t* kCache, bf16_t* vCache,
                                        const int* slotMapping, int numHeads, int numKvHeads, int D, float eps) {
  const int ropeBlocks = (numHeads + numKvHeads + ROPE_WARPS - 1) / ROPE_WARPS;
  for (int y = blockIdx.x; y < ropeBlocks; y += gridDim.x) {
    qk_norm_rope<bf16_t>(qkv, qNorm, kNorm, applyNorm, invFreq, positions, kCache, vCache, slotMapping, numHeads,
                         numKvHeads, D, eps, 0, y);
    __syncthreads();
  }
}

/** Attention: virtual blocks (row x, split z) of attention_decode's grid (numHeads / G, 1, attnZ), round the grid. */
template <int D, int G>
__device__ __noinline__ void attention_stage(const bf16_t* qkv, const bf16_t* kCache, const bf16_t* vCache,
                                             bf16_t* attn, float* partialOut, float* partialMl, int* rowCounters,
                                             const int* meta, const int* blockTables, const int* tokenToSeq,
                                             const int* positions, int numHeads, int numKvHeads, int blockShift,
                                             float scale, int splitTokens, int longSplitTokens,
                                             int shortSplitTokens, int maxSplits, int attnZ) {
  const int attnRows = numHeads / G;
  for (int vb = blockIdx.x; vb < attnRows * attnZ; vb += gridDim.x) {
    attention_decode<bf16_t, bf16_t, D, G>(qkv, kCache, vCache, attn, partialOut, partialMl, rowCounters, meta, blockTables,
                                   tokenToSeq, positions, numHeads, numKvHeads, blockShift, scale, splitTokens,
                                   longSplitTokens, shortSplitTokens, maxSplits, numHeads / numKvHeads, vb % attnRows,
                                   0, 0, vb / attnRows, attnRows, attnZ);
    __syncthreads();
  }
}

template <int D, int G>
__device__ void decode_layers(const unsigned long long* layers, int numLayers, int hidden, int inter, int numHeads,
                              int numKvHeads, float eps, float scale, int applyNorm, const float* invFreq,
                              const int* meta, const int* blockTables, const int* tokenToSeq, const int* positions,
                              const int* slotMapping, int blockShift, int splitTokens, int longSplitTokens,
                              int shortSplitTokens, int maxSplits, int attnZ, bf16_t* res0, bf16_t* res1,
                              bf16_t* scratch,
                              float* partialOut, float* partialMl, int* rowCounters, float* gemmPartials,
                              int* counters, unsigned long long* timeline) {
  extern __shared__ __align__(16) unsigned char mkShared[];
  bf16_t* xs = reinterpret_cast<bf16_t*>(mkShared);
  u32x4* ring = reinterpret_cast<u32x4*>(mkShared + (hidden * 2 + 15) / 16 * 16) +
                (threadIdx.x >> 5) * (GEMV_RING_BYTES / 16);
  const int qkvWidth = (numHeads + 2 * numKvHeads) * D;
  bf16_t* qkv = scratch;
  bf16_t* attn = qkv + qkvWidth;
  bf16_t* oOut = attn + numHeads * D;
  bf16_t* act = oOut + hidden;
  bf16_t* mlpOut = act + inter;
  unsigned* barrier = reinterpret_cast<unsigned*>(counters);
  int* tileCounters = counters + MK_TILE_COUNTERS;
  unsigned target = 0;
  bf16_t* res = res0;
  for (int l = 0; l < numLayers; l++) {
    const bf16_t* const* lp = reinterpret_cast<const bf16_t* const*>(layers + (size_t)l * LAYER_PTRS);
    bf16_t* kCache = const_cast<bf16_t*>(lp[LP_K_CACHE]);
    bf16_t* vCache = const_cast<bf16_t*>(lp[LP_V_CACHE]);

    // input norm -> qkv
    if (l == 0) {
      norm_stage(nullptr, nullptr, nullptr, res, lp[LP_INPUT_NORM], xs, hidden, eps);
    } else {
      bf16_t* next = res == res0 ? res1 : res0;
      norm_stage(mlpOut, res, blockIdx.x == 0 ? next : nullptr, nullptr, lp[LP_INPUT_NORM], xs, hidden, eps);
      res = next;
    }
    gemv<1, false>(lp[LP_QKV], qkvWidth, hidden, xs, qkv, gemmPartials, tileCounters, ring);
    grid_sync(barrier, target, timeline);

    // qk norm + rope, k and v into the cache
    rope_stage(qkv, lp[LP_Q_NORM], lp[LP_K_NORM], applyNorm, invFreq, positions, kCache, vCache, slotMapping, numHeads,
               numKvHeads, D, eps);
    grid_sync(barrier, target, timeline);

    attention_stage<D, G>(qkv, kCache, vCache, attn, partialOut, partialMl, rowCounters, meta, blockTables, tokenToSeq,
                          positions, numHeads, numKvHeads, blockShift, scale, splitTokens, longSplitTokens,
                          shortSplitTokens, maxSplits, attnZ);
    grid_sync(barrier, target, timeline);

    // o (its input read through L2)
    gemv<1, true>(lp[LP_O], hidden, numHeads * D, attn, oOut, gemmPartials, tileCounters, ring);
    grid_sync(barrier, target, timeline);

    // post-attention norm -> gate_up, whose pairs of tiles store silu(gate) * up
    {
      bf16_t* next = res == res0 ? res1 : res0;
      norm_stage(oOut, res, blockIdx.x == 0 ? next : nullptr, nullptr, lp[LP_POST_NORM], xs, hidden, eps);
      res = next;
    }
    gemv<2, false>(lp[LP_GATE_UP], inter, hidden, xs, act, gemmPartials, tileCounters, ring);
    grid_sync(barrier, target, timeline);

    // down (its input read through L2)
    gemv<1, true>(lp[LP_DOWN], hidden, inter, act, mlpOut, gemmPartials, tileCounters, ring);
    grid_sync(barrier, target, timeline);
  }
}

#define INSTANTIATE_DG(D, G)                                                                                      \
  extern "C" __global__ void __launch_bounds__(MK_THREADS, FUSED_BLOCKS_PER_SM) decode_layers_d##D##_g##G(                          \
      const unsigned long long* layers, int numLayers, int hidden, int inter, int numHeads, int numKvHeads,      \
      float eps, float scale, int applyNorm, const float* invFreq, const int* meta, const int* blockTables,       \
      const int* tokenToSeq, const int* positions, const int* slotMapping, int blockShift, int splitTokens,       \
      int longSplitTokens, int shortSplitTokens, int maxSplits, int attnZ, bf16_t* res0, bf16_t* res1,             \
      bf16_t* scratch,                                                                                            \
      float* partialOut, float* partialMl, int* rowCounters, float* gemmPartials, int* counters,                   \
      unsigned long long* timeline) {                                                                             \
    decode_layers<D, G>(layers, numLayers, hidden, inter, numHeads, numKvHeads, eps, scale, applyNorm, invFreq,   \
                        meta, blockTables, tokenToSeq, positions, slotMapping, blockShift, splitTokens,           \
                        longSplitTokens, shortSplitTokens, maxSplits, attnZ, res0, res1, scratch, partialOut,     \
                        partialMl,                                                                                \
                        rowCounters, gemmPartials, counters, timeline);                                           \
  }

INSTANTIATE_DG(64, 1)
INSTANTIATE_DG(64, 2)
INSTANTIATE_DG(64, 4)
INSTANTIATE_DG(64, 8)
INSTANTIATE_DG(128, 1)
INSTANTIATE_DG(128, 2)
INSTANTIATE_DG(128, 4)
INSTANTIATE_DG(128, 8)
