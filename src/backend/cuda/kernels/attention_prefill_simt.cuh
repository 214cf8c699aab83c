// The CUDA-core prefill attention (the engine's path before tensor cores): kept
// for f32 and as the baseline of bench-prefill.ts. A tile of `tileRows` rows is
// walked as sub-tiles of SIMT_BQ rows; each sub-tile walks the sequence's kv
// positions [0, its last row's position] in tiles of SIMT_BK read through the
// block table, causal per row, online softmax.
//
//   shared: sQ [BQ][D], sK [BK][D+2] (padded: lane j's row starts on bank j*(D/2+1)), sV [BK][D]
//   warp w owns rows w*RPW .. w*RPW+RPW-1; for a row, lane j scores key j of the tile and owns
//   output dims [lane*D/32, (lane+1)*D/32).
// Launch: grid (numTiles, numHeads), block 128 (4 warps).
#pragma once
#include "common.cuh"

#define SIMT_BQ 16
#define SIMT_BK 32
#define SIMT_WARPS 4

template <typename T, int D>
__device__ __forceinline__ void attention_prefill_simt_rows(const T* qkv, const T* kCache, const T* vCache, T* out,
                                                            const int* table, const int* positions, int row0,
                                                            int rowEnd, int h, int numHeads, int numKvHeads,
                                                            int blockSize, float scale) {
  constexpr int EPL = D / 32;
  constexpr int RPW = SIMT_BQ / SIMT_WARPS;
  constexpr int KP = D + 2;
  __shared__ __align__(16) T sQ[SIMT_BQ][D];
  __shared__ __align__(16) T sK[SIMT_BK][KP];
  __shared__ __align__(16) T sV[SIMT_BK][D];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int kvh = h / (numHeads / numKvHeads);
  const int qkvStride = (numHeads + 2 * numKvHeads) * D;
  const int kvEnd = positions[rowEnd - 1] + 1;
  __syncthreads();  // the previous sub-tile's warps are done with sQ

  for (int i = threadIdx.x; i < SIMT_BQ * D; i += blockDim.x) {
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

  for (int kt = 0; kt < kvEnd; kt += SIMT_BK) {
    __syncthreads();
    for (int i = threadIdx.x; i < SIMT_BK * D; i += blockDim.x) {
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
      for (int j = 0; j < SIMT_BK; j++) {
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

template <typename T, int D>
__device__ __forceinline__ void attention_prefill_simt(const T* qkv, const T* kCache, const T* vCache, T* out,
                                                       const int* meta, const int* blockTables, const int* tiles,
                                                       const int* queryStartLoc, const int* positions, int numHeads,
                                                       int numKvHeads, int blockSize, float scale, int tileRows) {
  const int seq = tiles[2 * blockIdx.x];
  const int row0 = tiles[2 * blockIdx.x + 1];
  const int tileEnd = min(row0 + tileRows, queryStartLoc[seq + 1]);
  const int* table = blockTables + (long long)seq * meta[META_BLOCK_TABLE_STRIDE];
  for (int sub = row0; sub < tileEnd; sub += SIMT_BQ) {
    attention_prefill_simt_rows<T, D>(qkv, kCache, vCache, out, table, positions, sub, min(sub + SIMT_BQ, tileEnd),
                                      blockIdx.y, numHeads, numKvHeads, blockSize, scale);
  }
}
