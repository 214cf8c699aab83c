// Paged attention for query chunks (prefill, chunked prefill, mixed batches):
// each block takes BQ consecutive query rows of one sequence and one q head,
// walks the sequence's kv positions [0, last row's position] in tiles of BK
// read through the block table (cached prefix and this chunk alike: the chunk's
// k/v were written to the cache first), causal per row, online softmax.
//
//   tiles[2i] = sequence, tiles[2i+1] = first flat row of the tile; rows past queryStartLoc[seq+1] idle.
//   shared: sQ [BQ][D], sK [BK][D+2] (padded: lane j's row starts on bank j*(D/2+1)), sV [BK][D]
//   warp w owns rows w*RPW .. w*RPW+RPW-1; for a row, lane j scores key j of the tile and owns
//   output dims [lane*D/32, (lane+1)*D/32).
//
// Shapes: qkv [numTokens, (numHeads + 2 numKvHeads) D]; caches [numBlocks, blockSize, numKvHeads, D];
//   out [numTokens, numHeads D].
// Launch: grid (numTiles, numHeads), block 128 (4 warps).
#include "common.cuh"

#define PREFILL_BQ 16
#define PREFILL_BK 32
#define PREFILL_WARPS 4

template <typename T, int D>
__device__ __forceinline__ void attention_prefill(const T* qkv, const T* kCache, const T* vCache, T* out,
                                                  const int* meta, const int* blockTables, const int* tiles,
                                                  const int* queryStartLoc, const int* positions, int numHeads,
                                                  int numKvHeads, int blockSize, float scale) {
  constexpr int EPL = D / 32;
  constexpr int RPW = PREFILL_BQ / PREFILL_WARPS;
  constexpr int KP = D + 2;
  __shared__ __align__(16) T sQ[PREFILL_BQ][D];
  __shared__ __align__(16) T sK[PREFILL_BK][KP];
  __shared__ __align__(16) T sV[PREFILL_BK][D];
  const int seq = tiles[2 * blockIdx.x];
  const int row0 = tiles[2 * blockIdx.x + 1];
  const int h = blockIdx.y;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int rowEnd = min(row0 + PREFILL_BQ, queryStartLoc[seq + 1]);
  const int kvh = h / (numHeads / numKvHeads);
  const int qkvStride = (numHeads + 2 * numKvHeads) * D;
  const int* table = blockTables + (long long)seq * meta[META_BLOCK_TABLE_STRIDE];
  const int kvEnd = positions[rowEnd - 1] + 1;

  for (int i = threadIdx.x; i < PREFILL_BQ * D; i += blockDim.x) {
    const int r = i / D, d = i % D;
    sQ[r][d] = row0 + r < rowEnd ? qkv[(long long)(row0 + r) * qkvStride + h * D + d] : from_float<T>(0.f);
  }
  int rowPos[RPW];
  float m[RPW], l[RPW], acc[RPW][EPL];
#pragma unroll
  for (int r = 0; r < RPW; r++) {
    const int row = row0 + warp * RPW + r;
    rowPos[r] = row < rowEnd ? positions[row] : -1;
    m[r] = NEG_INF;
    l[r] = 0.f;
#pragma unroll
    for (int e = 0; e < EPL; e++) acc[r][e] = 0.f;
  }

  for (int kt = 0; kt < kvEnd; kt += PREFILL_BK) {
    __syncthreads();
    for (int i = threadIdx.x; i < PREFILL_BK * D; i += blockDim.x) {
      const int j = i / D, d = i % D;
      const int key = kt + j;
      if (key < kvEnd) {
        const long long page = table[key / blockSize];
        const long long at = ((page * blockSize + key % blockSize) * numKvHeads + kvh) * D + d;
        sK[j][d] = kCache[at];
        sV[j][d] = vCache[at];
      } else {
        sK[j][d] = from_float<T>(0.f);
        sV[j][d] = from_float<T>(0.f);
      }
    }
    __syncthreads();
#pragma unroll
    for (int r = 0; r < RPW; r++) {
      const int pos = rowPos[r];
      if (pos < kt) continue;  // warp-uniform: idle row, or every key of the tile is in its future
      const int key = kt + lane;
      const T* qRow = sQ[warp * RPW + r];
      float s = NEG_INF;
      if (key <= pos) {
        float dot = 0.f;
#pragma unroll 8
        for (int d = 0; d < D; d += 2) {
          float q0, q1, k0, k1;
          load2(qRow + d, q0, q1);
          load2(&sK[lane][d], k0, k1);
          dot += q0 * k0 + q1 * k1;
        }
        s = dot * scale;
      }
      const float mNew = fmaxf(m[r], warp_max(s));
      const float corr = __expf(m[r] - mNew);
      const float p = key <= pos ? __expf(s - mNew) : 0.f;
      l[r] = l[r] * corr + warp_sum(p);
#pragma unroll
      for (int e = 0; e < EPL; e++) acc[r][e] *= corr;
      for (int j = 0; j < PREFILL_BK; j++) {
        const float pj = __shfl_sync(FULL_MASK, p, j);
#pragma unroll
        for (int e = 0; e < EPL; e++) acc[r][e] += pj * to_float(sV[j][lane * EPL + e]);
      }
      m[r] = mNew;
    }
  }
#pragma unroll
  for (int r = 0; r < RPW; r++) {
    if (rowPos[r] < 0) continue;
    const long long row = row0 + warp * RPW + r;
    T* o = out + row * numHeads * D + (long long)h * D + lane * EPL;
#pragma unroll
    for (int e = 0; e < EPL; e++) o[e] = from_float<T>(acc[r][e] / l[r]);
  }
}

#define INSTANTIATE_D(suffix, T, D)                                                                             \
  extern "C" __global__ void __launch_bounds__(128) attention_prefill_##suffix##_d##D(                          \
      const T* qkv, const T* kCache, const T* vCache, T* out, const int* meta, const int* blockTables,           \
      const int* tiles, const int* queryStartLoc, const int* positions, int numHeads, int numKvHeads,           \
      int blockSize, float scale) {                                                                             \
    attention_prefill<T, D>(qkv, kCache, vCache, out, meta, blockTables, tiles, queryStartLoc, positions,       \
                            numHeads, numKvHeads, blockSize, scale);                                            \
  }

INSTANTIATE_D(bf16, bf16_t, 64)
INSTANTIATE_D(bf16, bf16_t, 128)
INSTANTIATE_D(bf16, bf16_t, 256)
