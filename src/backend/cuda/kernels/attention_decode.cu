// Paged attention, one query token per row (decode, or any varlen batch), with
// the kv range split across thread blocks (flash-decoding) and merged after.
//
//   query token t of sequence s = tokenToSeq[t] attends to kv positions [0, positions[t]] (causal),
//   read through blockTables[s * stride + j / blockSize] (stride in the metadata header).
//   q head h reads kv head h / (numHeads / numKvHeads) (GQA).
//   split z of Z covers kv positions [z * per, min((z + 1) * per, kvLen)),
//   per = ceil(kvLen / min(Z, ceil(kvLen / MIN_SPLIT_TOKENS))); splits past the end are empty.
//
// Shapes: qkv [numTokens, (numHeads + 2 numKvHeads) D]; caches [numBlocks, blockSize, numKvHeads, D];
//   out [numTokens, numHeads D]; partialOut [numTokens, numHeads, Z, D] f32; partialMl [numTokens, numHeads, Z, 2].
// Launch: attention_decode grid (numTokens, numHeads, Z), block 128 (4 warps; in each round of 16 kv
//   positions of its split, warp w takes positions 4w .. 4w+3; lane owns D/32 consecutive dims).
//   Z == 1 writes out directly; otherwise attention_merge grid (numTokens, numHeads), block 128
//   combines the splits.
#include "common.cuh"

#define DECODE_WARPS 4
#define MIN_SPLIT_TOKENS 32
#define DECODE_UNROLL 4

template <typename T, int D>
__device__ __forceinline__ void attention_decode(const T* qkv, const T* kCache, const T* vCache, T* out,
                                                 float* partialOut, float* partialMl, const int* meta,
                                                 const int* blockTables, const int* tokenToSeq,
                                                 const int* positions, int numHeads, int numKvHeads, int blockSize,
                                                 float scale) {
  constexpr int EPL = D / 32;
  __shared__ float warpM[DECODE_WARPS], warpL[DECODE_WARPS];
  __shared__ float warpAcc[DECODE_WARPS][D];
  const int t = blockIdx.x, h = blockIdx.y, split = blockIdx.z, numSplits = gridDim.z;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int seq = tokenToSeq[t];
  const int kvLen = seq < 0 ? 0 : positions[t] + 1;
  const int numActive = max(1, min(numSplits, (kvLen + MIN_SPLIT_TOKENS - 1) / MIN_SPLIT_TOKENS));
  const int per = (kvLen + numActive - 1) / numActive;
  const int begin = split * per;
  const int end = min(kvLen, begin + per);
  const int kvh = h / (numHeads / numKvHeads);
  const int stride = meta[META_BLOCK_TABLE_STRIDE];
  const int* table = blockTables + (long long)max(seq, 0) * stride;

  const T* q = qkv + (long long)t * (numHeads + 2 * numKvHeads) * D + (long long)h * D + lane * EPL;
  float qf[EPL];
#pragma unroll
  for (int e = 0; e < EPL; e++) qf[e] = to_float(q[e]) * scale;

  float m = NEG_INF, l = 0.f, acc[EPL];
#pragma unroll
  for (int e = 0; e < EPL; e++) acc[e] = 0.f;
  // DECODE_UNROLL positions per warp per round: their K and V loads are all in flight together.
  for (int j0 = begin + warp * DECODE_UNROLL; j0 < end; j0 += DECODE_WARPS * DECODE_UNROLL) {
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
  const long long row = (long long)t * numHeads + h;
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    float o = 0.f;
    for (int w = 0; w < DECODE_WARPS; w++) if (warpL[w] > 0.f) o += warpAcc[w][d] * __expf(warpM[w] - M);
    if (numSplits == 1) out[row * D + d] = from_float<T>(L > 0.f ? o / L : 0.f);
    else partialOut[(row * numSplits + split) * D + d] = L > 0.f ? o / L : 0.f;
  }
  if (numSplits > 1 && threadIdx.x == 0) {
    partialMl[(row * numSplits + split) * 2] = M;
    partialMl[(row * numSplits + split) * 2 + 1] = L;
  }
}

template <typename T>
__device__ __forceinline__ void merge_splits(const float* partialOut, const float* partialMl, T* out, int numHeads,
                                             int headDim, int numSplits) {
  const long long row = (long long)blockIdx.x * numHeads + blockIdx.y;
  const float* ml = partialMl + row * numSplits * 2;
  float M = NEG_INF;
  for (int z = 0; z < numSplits; z++) if (ml[2 * z + 1] > 0.f) M = fmaxf(M, ml[2 * z]);
  float L = 0.f;
  for (int z = 0; z < numSplits; z++) if (ml[2 * z + 1] > 0.f) L += ml[2 * z + 1] * __expf(ml[2 * z] - M);
  for (int d = threadIdx.x; d < headDim; d += blockDim.x) {
    float o = 0.f;
    for (int z = 0; z < numSplits; z++) {
      if (ml[2 * z + 1] > 0.f) o += partialOut[(row * numSplits + z) * headDim + d] * ml[2 * z + 1] * __expf(ml[2 * z] - M);
    }
    out[row * headDim + d] = from_float<T>(L > 0.f ? o / L : 0.f);
  }
}

#define INSTANTIATE_D(suffix, T, D)                                                                           \
  extern "C" __global__ void __launch_bounds__(128) attention_decode_##suffix##_d##D(                         \
      const T* qkv, const T* kCache, const T* vCache, T* out, float* partialOut, float* partialMl,            \
      const int* meta, const int* blockTables, const int* tokenToSeq, const int* positions, int numHeads,     \
      int numKvHeads, int blockSize, float scale) {                                                           \
    attention_decode<T, D>(qkv, kCache, vCache, out, partialOut, partialMl, meta, blockTables, tokenToSeq,    \
                           positions, numHeads, numKvHeads, blockSize, scale);                                \
  }

#define INSTANTIATE(suffix, T)                                                                                 \
  INSTANTIATE_D(suffix, T, 64)                                                                                 \
  INSTANTIATE_D(suffix, T, 128)                                                                                \
  INSTANTIATE_D(suffix, T, 256)                                                                                \
  extern "C" __global__ void attention_merge_##suffix(const float* partialOut, const float* partialMl, T* out, \
                                                      int numHeads, int headDim, int numSplits) {             \
    merge_splits<T>(partialOut, partialMl, out, numHeads, headDim, numSplits);                                 \
  }

INSTANTIATE(bf16, bf16_t)
INSTANTIATE(f32, float)
