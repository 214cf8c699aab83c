// Paged attention, one query token per row (decode, or any varlen batch), with
// the kv range split across thread blocks (flash-decoding) and merged after.
//
//   query token t of sequence s = tokenToSeq[t] attends to kv positions [0, kvLen), kvLen = positions[t] + 1
//   (causal), read through blockTables[s * stride + j / blockSize] (stride in the metadata header).
//   q head h reads kv head h / (numHeads / numKvHeads) (GQA).
//
// Batch invariance: a row's splits are a pure function of its own kvLen (split_plan), never of the
// batch, the grid or eager vs graph:
//   wanted = min(maxSplits, ceil(kvLen / splitTokens)); chunk = ceil(kvLen / wanted) rounded up to 16;
//   numSplits = ceil(kvLen / chunk) (<= wanted, none empty); split z covers [z chunk, min((z+1) chunk, kvLen)).
// Block (t, h, z) computes splits z, z + gridDim.z, ... of row (t, h), so the grid's z extent only decides
// how many blocks share the work: blocks with z >= numSplits exit at once. A row of one split writes out
// directly; otherwise every split writes partialOut/partialMl and attention_merge combines them in split
// order, skipping rows of one split. The host passes splitTokens = 128 and maxSplits = 16
// (decode-splits.ts): batch 1 of 32 heads spreads a 1k context over 256 blocks and 2k-4k over 512 (2-4
// per SM of an H100's 132), while the host sizes grid z from the batch (about 4 blocks per SM), so batch
// 256 with ~600-token contexts launches one block per (token, head) that walks its 5 splits, with no
// empty blocks.
//
// Shapes: qkv [numTokens, (numHeads + 2 numKvHeads) D]; caches [numBlocks, blockSize, numKvHeads, D];
//   out [numTokens, numHeads D]; partialOut [numTokens, numHeads, maxSplits, D] f32;
//   partialMl [numTokens, numHeads, maxSplits, 2] f32 (running max, sum of exp).
// Launch: attention_decode grid (numTokens, numHeads, Z), block 128 (4 warps; in each round of 16 kv
//   positions of a split, warp w takes positions 4w .. 4w+3; lane owns D/32 consecutive dims).
//   attention_merge grid (numTokens, numHeads), block 128.
#include "common.cuh"

#define DECODE_WARPS 4
#define DECODE_UNROLL 4
#define DECODE_ROUND (DECODE_WARPS * DECODE_UNROLL)

struct SplitPlan {
  int numSplits;
  int chunk;
};

__device__ __forceinline__ SplitPlan split_plan(int kvLen, int splitTokens, int maxSplits) {
  if (kvLen <= 0) return SplitPlan{1, DECODE_ROUND};
  const int wanted = max(1, min(maxSplits, (kvLen + splitTokens - 1) / splitTokens));
  const int per = (kvLen + wanted - 1) / wanted;
  const int chunk = (per + DECODE_ROUND - 1) / DECODE_ROUND * DECODE_ROUND;
  return SplitPlan{(kvLen + chunk - 1) / chunk, chunk};
}

__device__ __forceinline__ int row_kv_len(const int* tokenToSeq, const int* positions, int t) {
  return tokenToSeq[t] < 0 ? 0 : positions[t] + 1;
}

template <typename T, int D>
__device__ __forceinline__ void attention_decode(const T* qkv, const T* kCache, const T* vCache, T* out,
                                                 float* partialOut, float* partialMl, const int* meta,
                                                 const int* blockTables, const int* tokenToSeq,
                                                 const int* positions, int numHeads, int numKvHeads, int blockSize,
                                                 float scale, int splitTokens, int maxSplits) {
  constexpr int EPL = D / 32;
  __shared__ float warpM[DECODE_WARPS], warpL[DECODE_WARPS];
  __shared__ float warpAcc[DECODE_WARPS][D];
  const int t = blockIdx.x, h = blockIdx.y;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int seq = tokenToSeq[t];
  const int kvLen = row_kv_len(tokenToSeq, positions, t);
  const SplitPlan plan = split_plan(kvLen, splitTokens, maxSplits);
  if ((int)blockIdx.z >= plan.numSplits) return;
  const int kvh = h / (numHeads / numKvHeads);
  const int stride = meta[META_BLOCK_TABLE_STRIDE];
  const int* table = blockTables + (long long)max(seq, 0) * stride;
  const long long row = (long long)t * numHeads + h;

  const T* q = qkv + (long long)t * (numHeads + 2 * numKvHeads) * D + (long long)h * D + lane * EPL;
  float qf[EPL];
#pragma unroll
  for (int e = 0; e < EPL; e++) qf[e] = to_float(q[e]) * scale;

  for (int split = blockIdx.z; split < plan.numSplits; split += gridDim.z) {
    const int begin = split * plan.chunk;
    const int end = min(kvLen, begin + plan.chunk);
    float m = NEG_INF, l = 0.f, acc[EPL];
#pragma unroll
    for (int e = 0; e < EPL; e++) acc[e] = 0.f;
    // DECODE_UNROLL positions per warp per round: their K and V loads are all in flight together.
    for (int j0 = begin + warp * DECODE_UNROLL; j0 < end; j0 += DECODE_ROUND) {
      float kf[DECODE_UNROLL][EPL], vf[DECODE_UNROLL][EPL], s[DECODE_UNROLL];
#pragma unroll
      for (int u = 0; u < DECODE_UNROLL; u++) {
        const int j = min(j0 + u, end - 1);
        const long long page = table[j / blockSize];
        const long long base = ((page * blockSize + j % blockSize) * numKvHeads + kvh) * D + lane * EPL;
#pragma unroll
        for (int e = 0; e < EPL; e++) {
          kf[u][e] = to_float(kCache[base + e]);
          vf[u][e] = to_float(vCache[base + e]);
        }
      }
#pragma unroll
      for (int u = 0; u < DECODE_UNROLL; u++) {
        s[u] = 0.f;
#pragma unroll
        for (int e = 0; e < EPL; e++) s[u] += qf[e] * kf[u][e];
      }
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) {
#pragma unroll
        for (int u = 0; u < DECODE_UNROLL; u++) s[u] += __shfl_xor_sync(FULL_MASK, s[u], o);
      }
      float mNew = m;
#pragma unroll
      for (int u = 0; u < DECODE_UNROLL; u++) if (j0 + u < end) mNew = fmaxf(mNew, s[u]);
      const float corr = __expf(m - mNew);
      l *= corr;
#pragma unroll
      for (int e = 0; e < EPL; e++) acc[e] *= corr;
#pragma unroll
      for (int u = 0; u < DECODE_UNROLL; u++) {
        const float p = j0 + u < end ? __expf(s[u] - mNew) : 0.f;
        l += p;
#pragma unroll
        for (int e = 0; e < EPL; e++) acc[e] += p * vf[u][e];
      }
      m = mNew;
    }
    if (lane == 0) { warpM[warp] = m; warpL[warp] = l; }
#pragma unroll
    for (int e = 0; e < EPL; e++) warpAcc[warp][lane * EPL + e] = acc[e];
    __syncthreads();

    float M = NEG_INF;
    for (int w = 0; w < DECODE_WARPS; w++) if (warpL[w] > 0.f) M = fmaxf(M, warpM[w]);
    float L = 0.f;
    for (int w = 0; w < DECODE_WARPS; w++) if (warpL[w] > 0.f) L += warpL[w] * __expf(warpM[w] - M);
    for (int d = threadIdx.x; d < D; d += blockDim.x) {
      float o = 0.f;
      for (int w = 0; w < DECODE_WARPS; w++) if (warpL[w] > 0.f) o += warpAcc[w][d] * __expf(warpM[w] - M);
      if (plan.numSplits == 1) out[row * D + d] = from_float<T>(L > 0.f ? o / L : 0.f);
      else partialOut[(row * maxSplits + split) * D + d] = L > 0.f ? o / L : 0.f;
    }
    if (plan.numSplits > 1 && threadIdx.x == 0) {
      partialMl[(row * maxSplits + split) * 2] = M;
      partialMl[(row * maxSplits + split) * 2 + 1] = L;
    }
    __syncthreads();  // warpM/warpL/warpAcc are rewritten by the block's next split
  }
}

template <typename T>
__device__ __forceinline__ void merge_splits(const float* partialOut, const float* partialMl, T* out,
                                             const int* tokenToSeq, const int* positions, int numHeads,
                                             int headDim, int splitTokens, int maxSplits) {
  const int t = blockIdx.x;
  const int numSplits = split_plan(row_kv_len(tokenToSeq, positions, t), splitTokens, maxSplits).numSplits;
  if (numSplits == 1) return;
  const long long row = (long long)t * numHeads + blockIdx.y;
  const float* ml = partialMl + row * maxSplits * 2;
  float M = NEG_INF;
  for (int z = 0; z < numSplits; z++) if (ml[2 * z + 1] > 0.f) M = fmaxf(M, ml[2 * z]);
  float L = 0.f;
  for (int z = 0; z < numSplits; z++) if (ml[2 * z + 1] > 0.f) L += ml[2 * z + 1] * __expf(ml[2 * z] - M);
  for (int d = threadIdx.x; d < headDim; d += blockDim.x) {
    float o = 0.f;
    for (int z = 0; z < numSplits; z++) {
      if (ml[2 * z + 1] > 0.f) o += partialOut[(row * maxSplits + z) * headDim + d] * ml[2 * z + 1] * __expf(ml[2 * z] - M);
    }
    out[row * headDim + d] = from_float<T>(L > 0.f ? o / L : 0.f);
  }
}

#define INSTANTIATE_D(suffix, T, D)                                                                           \
  extern "C" __global__ void __launch_bounds__(128) attention_decode_##suffix##_d##D(                         \
      const T* qkv, const T* kCache, const T* vCache, T* out, float* partialOut, float* partialMl,            \
      const int* meta, const int* blockTables, const int* tokenToSeq, const int* positions, int numHeads,     \
      int numKvHeads, int blockSize, float scale, int splitTokens, int maxSplits) {                           \
    attention_decode<T, D>(qkv, kCache, vCache, out, partialOut, partialMl, meta, blockTables, tokenToSeq,    \
                           positions, numHeads, numKvHeads, blockSize, scale, splitTokens, maxSplits);        \
  }

#define INSTANTIATE(suffix, T)                                                                                 \
  INSTANTIATE_D(suffix, T, 64)                                                                                 \
  INSTANTIATE_D(suffix, T, 128)                                                                                \
  INSTANTIATE_D(suffix, T, 256)                                                                                \
  extern "C" __global__ void attention_merge_##suffix(const float* partialOut, const float* partialMl, T* out, \
      const int* tokenToSeq, const int* positions, int numHeads, int headDim, int splitTokens, int maxSplits) {  \
    merge_splits<T>(partialOut, partialMl, out, tokenToSeq, positions, numHeads, headDim, splitTokens,         \
                    maxSplits);                                                                                \
  }

INSTANTIATE(bf16, bf16_t)
INSTANTIATE(f32, float)
