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
// GQA: block (t, y, z) serves the G query heads h0 = y G .. h0 + G - 1, which share kv head h0 / qHeadsPerKv
// (G, a template argument, is the largest of 8, 4, 2, 1 dividing qHeadsPerKv), reading each K and V once
// for all of them; per head the arithmetic is that of G = 1, so the choice of G changes no bit.
// Block (t, y, z) computes splits z, z + gridDim.z, ... of its rows, so the grid's z extent only decides
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
// Launch: attention_decode_<dtype>_d<D>_g<G> grid (numTokens, numHeads / G, Z), block 128 (4 warps; in each round of 16 kv
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

/** N consecutive elements as floats; for bf16, p is aligned to 2N bytes (8-byte loads, then a 4-byte one). */
template <int N>
__device__ __forceinline__ void load_n(const bf16_t* p, float* out) {
#pragma unroll
  for (int i = 0; i < N / 4; i++) {
    const uint2 w = reinterpret_cast<const uint2*>(p)[i];
    out[4 * i] = __uint_as_float(w.x << 16);
    out[4 * i + 1] = __uint_as_float(w.x & 0xffff0000u);
    out[4 * i + 2] = __uint_as_float(w.y << 16);
    out[4 * i + 3] = __uint_as_float(w.y & 0xffff0000u);
  }
#pragma unroll
  for (int i = N / 4 * 4; i + 1 < N; i += 2) load2(p + i, out[i], out[i + 1]);
}
template <int N>
__device__ __forceinline__ void load_n(const float* p, float* out) {
#pragma unroll
  for (int i = 0; i < N; i++) out[i] = p[i];
}

template <typename T, int D, int G>
__device__ __forceinline__ void attention_decode(const T* qkv, const T* kCache, const T* vCache, T* out,
                                                 float* partialOut, float* partialMl, const int* meta,
                                                 const int* blockTables, const int* tokenToSeq,
                                                 const int* positions, int numHeads, int numKvHeads, int blockSize,
                                                 float scale, int splitTokens, int maxSplits, int qHeadsPerKv) {
  constexpr int EPL = D / 32;
  __shared__ float warpM[DECODE_WARPS][G], warpL[DECODE_WARPS][G];
  __shared__ float warpAcc[DECODE_WARPS][G][D];
  const int t = blockIdx.x, h0 = blockIdx.y * G, kvh = h0 / qHeadsPerKv;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int seq = tokenToSeq[t];
  const int kvLen = row_kv_len(tokenToSeq, positions, t);
  const SplitPlan plan = split_plan(kvLen, splitTokens, maxSplits);
  if ((int)blockIdx.z >= plan.numSplits) return;
  const int stride = meta[META_BLOCK_TABLE_STRIDE];
  const int* table = blockTables + (long long)max(seq, 0) * stride;

  // the G query heads h0 .. h0 + G - 1 share kv head kvh: K and V are read once for all of them
  float qf[G][EPL];
#pragma unroll
  for (int g = 0; g < G; g++) {
    const T* q = qkv + (long long)t * (numHeads + 2 * numKvHeads) * D + (long long)(h0 + g) * D + lane * EPL;
#pragma unroll
    for (int e = 0; e < EPL; e++) qf[g][e] = to_float(q[e]) * scale;
  }

  for (int split = blockIdx.z; split < plan.numSplits; split += gridDim.z) {
    const int begin = split * plan.chunk;
    const int end = min(kvLen, begin + plan.chunk);
    float m[G], l[G], acc[G][EPL];
#pragma unroll
    for (int g = 0; g < G; g++) {
      m[g] = NEG_INF;
      l[g] = 0.f;
#pragma unroll
      for (int e = 0; e < EPL; e++) acc[g][e] = 0.f;
    }
    // DECODE_UNROLL positions per warp per round: their K and V loads are all in flight together.
    for (int j0 = begin + warp * DECODE_UNROLL; j0 < end; j0 += DECODE_ROUND) {
      float kf[DECODE_UNROLL][EPL], vf[DECODE_UNROLL][EPL];
#pragma unroll
      for (int u = 0; u < DECODE_UNROLL; u++) {
        const int j = min(j0 + u, end - 1);
        const long long page = table[j / blockSize];
        const long long base = ((page * blockSize + j % blockSize) * numKvHeads + kvh) * D + lane * EPL;
        load_n<EPL>(kCache + base, kf[u]);
        load_n<EPL>(vCache + base, vf[u]);
      }
#pragma unroll
      for (int g = 0; g < G; g++) {
        float s[DECODE_UNROLL];
#pragma unroll
        for (int u = 0; u < DECODE_UNROLL; u++) {
          s[u] = 0.f;
#pragma unroll
          for (int e = 0; e < EPL; e++) s[u] += qf[g][e] * kf[u][e];
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
#pragma unroll
          for (int u = 0; u < DECODE_UNROLL; u++) s[u] += __shfl_xor_sync(FULL_MASK, s[u], o);
        }
        float mNew = m[g];
#pragma unroll
        for (int u = 0; u < DECODE_UNROLL; u++) if (j0 + u < end) mNew = fmaxf(mNew, s[u]);
        const float corr = __expf(m[g] - mNew);
        l[g] *= corr;
#pragma unroll
        for (int e = 0; e < EPL; e++) acc[g][e] *= corr;
#pragma unroll
        for (int u = 0; u < DECODE_UNROLL; u++) {
          const float p = j0 + u < end ? __expf(s[u] - mNew) : 0.f;
          l[g] += p;
#pragma unroll
          for (int e = 0; e < EPL; e++) acc[g][e] += p * vf[u][e];
        }
        m[g] = mNew;
      }
    }
#pragma unroll
    for (int g = 0; g < G; g++) {
      if (lane == 0) { warpM[warp][g] = m[g]; warpL[warp][g] = l[g]; }
#pragma unroll
      for (int e = 0; e < EPL; e++) warpAcc[warp][g][lane * EPL + e] = acc[g][e];
    }
    __syncthreads();

    for (int g = 0; g < G; g++) {
      const long long row = (long long)t * numHeads + h0 + g;
      float M = NEG_INF;
      for (int w = 0; w < DECODE_WARPS; w++) if (warpL[w][g] > 0.f) M = fmaxf(M, warpM[w][g]);
      float L = 0.f;
      for (int w = 0; w < DECODE_WARPS; w++) if (warpL[w][g] > 0.f) L += warpL[w][g] * __expf(warpM[w][g] - M);
      for (int d = threadIdx.x; d < D; d += blockDim.x) {
        float o = 0.f;
        for (int w = 0; w < DECODE_WARPS; w++) if (warpL[w][g] > 0.f) o += warpAcc[w][g][d] * __expf(warpM[w][g] - M);
        if (plan.numSplits == 1) out[row * D + d] = from_float<T>(L > 0.f ? o / L : 0.f);
        else partialOut[(row * maxSplits + split) * D + d] = L > 0.f ? o / L : 0.f;
      }
      if (plan.numSplits > 1 && threadIdx.x == 0) {
        partialMl[(row * maxSplits + split) * 2] = M;
        partialMl[(row * maxSplits + split) * 2 + 1] = L;
      }
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

#define INSTANTIATE_DG(suffix, T, D, G)                                                                      \
  extern "C" __global__ void __launch_bounds__(128) attention_decode_##suffix##_d##D##_g##G(                  \
      const T* qkv, const T* kCache, const T* vCache, T* out, float* partialOut, float* partialMl,            \
      const int* meta, const int* blockTables, const int* tokenToSeq, const int* positions, int numHeads,     \
      int numKvHeads, int blockSize, float scale, int splitTokens, int maxSplits, int qHeadsPerKv) {          \
    attention_decode<T, D, G>(qkv, kCache, vCache, out, partialOut, partialMl, meta, blockTables, tokenToSeq, \
                              positions, numHeads, numKvHeads, blockSize, scale, splitTokens, maxSplits,      \
                              qHeadsPerKv);                                                                   \
  }

#define INSTANTIATE_D(suffix, T, D) \
  INSTANTIATE_DG(suffix, T, D, 1)   \
  INSTANTIATE_DG(suffix, T, D, 2)   \
  INSTANTIATE_DG(suffix, T, D, 4)   \
  INSTANTIATE_DG(suffix, T, D, 8)

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
