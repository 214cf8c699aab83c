// Token sampling on the GPU: one thread block per logits row, no copy of the
// logits to the host. Mirrors src/sampling/draw.ts (the reference, run by the
// CPU backend's sampleTokens) given the row's uniform u, drawn on the host from
// the request's RNG:
//
//   temperature <= 0:  argmax (ties to the lowest id)
//   s_i = (x_i - max) / T          (double)
//   floor = max(-60, ln minP, s of the k-th largest logit)    w_i = e^s_i if s_i >= floor else 0
//   top-p: ids in (value desc, id asc) order are kept while the mass before them is < p * sum(w)
//   token: first id (ascending) whose cumulative kept weight exceeds u * sum(kept)
//
// Thresholds (k-th largest logit, top-p cut value) are found by a 32-way search
// (search_key) over order-preserving integer keys of the logits; every sum is a
// fixed-order reduction, so a row's token depends on that row alone
// (deterministic, batch invariant). Passes over a bf16 row read it in 16-byte
// loads (for_row).
//
// Row parameters: params[0*stride + r] temperature (f32 bits), [1] topK (int),
// [2] topP (f32), [3] minP (f32), [4] uniform (f32); stride = the metadata's row capacity.
#include "common.cuh"

// SAMPLE_THREADS, a block's threads: from TypeScript (kernel-defines.ts), which launches with it
#define NEGLIGIBLE_LOG_WEIGHT (-60.0)

__device__ __forceinline__ unsigned order_key(bf16_t v) {
  const unsigned b = v.bits;
  return (b & 0x8000u) ? (~b & 0xffffu) : (b | 0x8000u);
}
__device__ __forceinline__ unsigned order_key(float v) {
  const unsigned b = __float_as_uint(v);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}
template <typename T> __device__ __forceinline__ T bits_as(unsigned b);
template <> __device__ __forceinline__ bf16_t bits_as<bf16_t>(unsigned b) { return bf16_t{(unsigned short)b}; }
template <> __device__ __forceinline__ float bits_as<float>(unsigned b) { return __uint_as_float(b); }
template <typename T> struct KeyTraits;
template <> struct KeyTraits<bf16_t> { static constexpr unsigned kMax = 0xffffu; };
template <> struct KeyTraits<float> { static constexpr unsigned kMax = 0xffffffffu; };

template <typename T> __device__ __forceinline__ float key_value(unsigned key);
template <> __device__ __forceinline__ float key_value<bf16_t>(unsigned key) {
  const unsigned b = (key & 0x8000u) ? (key & 0x7fffu) : (~key & 0xffffu);
  return __uint_as_float(b << 16);
}
template <> __device__ __forceinline__ float key_value<float>(unsigned key) {
  return __uint_as_float((key & 0x80000000u) ? (key & 0x7fffffffu) : ~key);
}

/** Fixed-order sum over the block; every thread gets the same total. */
template <typename V>
__device__ __forceinline__ V block_total(V v, V* scratch) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(FULL_MASK, v, o);
  __syncthreads();
  if ((threadIdx.x & 31) == 0) scratch[threadIdx.x >> 5] = v;
  __syncthreads();
  V total = 0;
  for (int w = 0; w < (int)(blockDim.x >> 5); w++) total += scratch[w];
  return total;
}

/** Fixed-order exclusive prefix sum over threads in index order. */
template <typename V>
__device__ __forceinline__ V block_exclusive(V v, V* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  V x = v;
  for (int o = 1; o < 32; o <<= 1) {
    const V y = __shfl_up_sync(FULL_MASK, x, o);
    if (lane >= o) x += y;
  }
  V excl = __shfl_up_sync(FULL_MASK, x, 1);
  if (lane == 0) excl = 0;
  __syncthreads();
  if (lane == 31) scratch[warp] = x;
  __syncthreads();
  V offset = 0;
  for (int w = 0; w < warp; w++) offset += scratch[w];
  return offset + excl;
}

__device__ __forceinline__ bool better(float v, int i, float bestV, int bestI) {
  return v > bestV || (v == bestV && i < bestI);
}

/** The block's best (value desc, id asc) of every thread's (bestV, bestI), to every thread (sVal, sIdx: 32 each). */
__device__ __forceinline__ void block_best(float& bestV, int& bestI, float* sVal, int* sIdx) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int o = 16; o > 0; o >>= 1) {
    const float v = __shfl_xor_sync(FULL_MASK, bestV, o);
    const int i = __shfl_xor_sync(FULL_MASK, bestI, o);
    if (better(v, i, bestV, bestI)) { bestV = v; bestI = i; }
  }
  __syncthreads();  // sVal / sIdx may still be read from the block's previous call
  if (lane == 0) { sVal[warp] = bestV; sIdx[warp] = bestI; }
  __syncthreads();
  bestV = NEG_INF;
  bestI = 0x7fffffff;
  for (int w = 0; w < (int)(blockDim.x >> 5); w++) {
    if (better(sVal[w], sIdx[w], bestV, bestI)) { bestV = sVal[w]; bestI = sIdx[w]; }
  }
}

/**
 * Calls f(value, id) for the ids of the row this thread takes in a pass: bf16 rows of vocab % 8 == 0 in 16-byte
 * loads of 8 consecutive ids (thread t takes loads t, t + blockDim.x, ...), others one id at a time. A pass's
 * per-thread sums follow this order, then a fixed-order block reduction: deterministic, the row's alone.
 */
template <typename T, typename F>
__device__ __forceinline__ void for_row(const T* row, int vocab, F f) {
  if (sizeof(T) == 2 && vocab % 8 == 0) {
    const uint4* row8 = reinterpret_cast<const uint4*>(row);
#pragma unroll 2
    for (int c = threadIdx.x; c < vocab / 8; c += blockDim.x) {
      const uint4 w = row8[c];
      const unsigned u[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
      for (int k = 0; k < 4; k++) {
        f(bits_as<T>(u[k] & 0xffffu), 8 * c + 2 * k);
        f(bits_as<T>(u[k] >> 16), 8 * c + 2 * k + 1);
      }
    }
  } else {
    for (int i = threadIdx.x; i < vocab; i += blockDim.x) f(row[i], i);
  }
}

/**
 * The largest key K in [lo, hi] with total(K) >= limit, total(K) = the block's sum of contrib(v) over the row's
 * values of order_key >= K (non-increasing in K; total(lo) >= limit is given). With limitShare > 0 (and lo = 0),
 * limit is set to limitShare x the row's total, summed in the first pass. Each pass weighs every value once
 * against the candidate keys lo + j 2^sh, j = 1 .. nc <= 31 (2^sh the least power of two with 32 2^sh > hi - lo):
 * a 16-bit key in 4 passes, not the 16 of a bisection. Per-thread sums per bucket of candidates reached, in
 * for_row's order, then fixed-order block sums and suffix sums: deterministic, the row's alone.
 */
template <typename T, typename V, typename W>
__device__ unsigned search_key(const T* row, int vocab, unsigned lo, unsigned hi, V& limit, W contrib,
                               double limitShare = 0.0) {
  // Integer counts go to per-warp shared counters by atomics (any order, the same counts); sums of doubles stay per
  // thread (in for_row's order), then warp butterflies, so their rounding is the same every run.
  constexpr bool kCount = sizeof(V) == sizeof(int);
  __shared__ V sPart[32][32];  // [warp][bucket]
  __shared__ V sTotal[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, numWarps = blockDim.x >> 5;
  while (lo < hi) {
    const unsigned span = hi - lo;
    int sh = 0;
    while ((span >> sh) >= 32u) sh++;
    const int nc = (int)(span >> sh);  // candidates lo + j 2^sh <= hi, 1 <= nc <= 31
    V acc[kCount ? 1 : 32];
#pragma unroll
    for (int b = 0; b < (kCount ? 1 : 32); b++) acc[b] = 0;
    if (kCount) {
      sPart[warp][lane] = 0;
      __syncwarp();
    }
    for_row(row, vocab, [&](T v, int) {
      const unsigned key = order_key(v);
      if (key <= lo) return;
      // bucket b: lo + b 2^sh <= key < lo + (b + 1) 2^sh, every key from the last candidate up in bucket nc
      const int b = min(nc, (int)((key - lo) >> sh));
      if (kCount) atomicAdd(reinterpret_cast<int*>(&sPart[warp][b]), (int)contrib(v));
      else acc[b] += contrib(v);
    });
    if (!kCount) {
#pragma unroll
      for (int b = 0; b < 32; b++) {
        V x = acc[kCount ? 0 : b];
        for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(FULL_MASK, x, o);
        if (lane == 0) sPart[warp][b] = x;
      }
    }
    __syncthreads();
    if (threadIdx.x < 32) {
      V t = 0;
      for (int w = 0; w < numWarps; w++) t += sPart[w][threadIdx.x];
      sTotal[threadIdx.x] = t;
    }
    __syncthreads();
    if (limitShare > 0.0) {
      // limit = limitShare x the total of contrib over the row (lo = 0: only keys of NaN, which weigh 0, sit below)
      V total = 0;
      for (int b = 0; b <= nc; b++) total += sTotal[b];
      limit = (V)(limitShare * (double)total);
      limitShare = 0.0;
    }
    V suffix = 0;
    unsigned newLo = lo, newHi = lo + (1u << sh) - 1;
    for (int j = nc; j >= 1; j--) {
      suffix += sTotal[j];
      if (suffix >= limit) {
        newLo = lo + ((unsigned)j << sh);
        newHi = j == nc ? hi : newLo + (1u << sh) - 1;
        break;
      }
    }
    __syncthreads();  // sTotal and sPart are read before the next pass writes them
    lo = newLo;
    hi = newHi;
  }
  return lo;
}

struct RowDist {
  double max, invT, floor;
};

__device__ __forceinline__ double weight_of(float x, const RowDist& d) {
  const double s = ((double)x - d.max) * d.invT;
  return s >= d.floor ? exp(s) : 0.0;
}

template <typename T>
__device__ void sample_row(const T* logits, int vocab, const int* params, int stride, int* out) {
  __shared__ double dScratch[32];
  __shared__ int iScratch[32];
  __shared__ float sVal[32];
  __shared__ int sIdx[32];
  const int r = blockIdx.x;
  const T* row = logits + (long long)r * vocab;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;

  // argmax, ties to the lowest id; NaN never wins (the same result in any order)
  float bestV = NEG_INF;
  int bestI = 0x7fffffff;
  for_row(row, vocab, [&](T x, int i) {
    const float v = to_float(x);
    if (better(v, i, bestV, bestI)) { bestV = v; bestI = i; }
  });
  block_best(bestV, bestI, sVal, sIdx);
  const int greedy = (bestI == 0x7fffffff || !(bestV > NEG_INF)) ? 0 : bestI;

  const float temperature = __int_as_float(params[r]);
  if (!(temperature > 0.f) || !(bestV > NEG_INF)) {
    if (threadIdx.x == 0) out[r] = greedy;
    return;
  }
  const int topK = params[stride + r];
  const float topP = __int_as_float(params[2 * stride + r]);
  const float minP = __int_as_float(params[3 * stride + r]);
  const float uniform = __int_as_float(params[4 * stride + r]);

  RowDist d;
  d.max = (double)bestV;
  d.invT = 1.0 / (double)temperature;
  d.floor = NEGLIGIBLE_LOG_WEIGHT;
  if (minP > 0.f) d.floor = fmax(d.floor, log((double)minP));

  if (topK > 0 && topK < vocab) {
    // the k-th largest finite logit: the largest key K with count(key >= K) >= k
    int numValid = 0;
    for_row(row, vocab, [&](T v, int) {
      const float x = to_float(v);
      numValid += (x > NEG_INF && x == x) ? 1 : 0;
    });
    if (block_total(numValid, iScratch) >= topK) {
      int kLimit = topK;
      const unsigned lo = search_key<T, int>(row, vocab, 0u, KeyTraits<T>::kMax, kLimit, [&](T v) {
        const float x = to_float(v);
        return (x > NEG_INF && x == x) ? 1 : 0;
      });
      d.floor = fmax(d.floor, ((double)key_value<T>(lo) - d.max) * d.invT);
    }
  }

  // top-p: cutKey = the largest key K with mass(key >= K) >= p * z (z, the total weight, summed in the search's
  // first pass); ids above it stay, the first numTiesKept ids (ascending) with key == cutKey stay, the rest go.
  // Without top-p the kept weight is the sum of the chunks' kept weights below: no pass of its own.
  bool cut = false;
  unsigned cutKey = 0;
  int numTiesKept = 0;
  double zKept = 0.0;
  if (topP < 1.f) {
    double limit = 0.0;  // p x the total weight, which the search sums in its first pass
    cutKey = search_key<T, double>(row, vocab, 0u, KeyTraits<T>::kMax, limit,
                                   [&](T v) { return weight_of(to_float(v), d); }, (double)topP);
    double above = 0.0;
    int numTies = 0;
    for_row(row, vocab, [&](T v, int) {
      const unsigned key = order_key(v);
      const double w = weight_of(to_float(v), d);
      if (key > cutKey) above += w;
      else if (key == cutKey && w > 0.0) numTies++;
    });
    above = block_total(above, dScratch);
    numTies = block_total(numTies, iScratch);
    const double tieWeight = weight_of(key_value<T>(cutKey), d);
    double massBefore = above;
    while (numTiesKept < numTies && massBefore < limit) {
      massBefore += tieWeight;
      numTiesKept++;
    }
    cut = true;
    zKept = massBefore;
  }

  // inverse CDF in id order over contiguous chunks, one per thread
  const int chunk = (vocab + blockDim.x - 1) / blockDim.x;
  const int begin = min(vocab, (int)threadIdx.x * chunk), end = min(vocab, begin + chunk);
  int chunkTies = 0;
  if (cut) {
    for (int i = begin; i < end; i++) {
      if (order_key(row[i]) == cutKey && weight_of(to_float(row[i]), d) > 0.0) chunkTies++;
    }
  }
  int tieRank = block_exclusive(chunkTies, iScratch);
  double chunkKept = 0.0;
  {
    int rank = tieRank;
    for (int i = begin; i < end; i++) {
      const unsigned key = order_key(row[i]);
      const double w = weight_of(to_float(row[i]), d);
      if (cut && key == cutKey && w > 0.0) { if (rank++ < numTiesKept) chunkKept += w; }
      else if (!cut || key > cutKey) chunkKept += w;
    }
  }
  if (!cut) zKept = block_total(chunkKept, dScratch);
  double cumulative = block_exclusive(chunkKept, dScratch);
  const double target = (double)uniform * zKept;
  int found = 0x7fffffff, lastKept = -1;
  for (int i = begin; i < end; i++) {
    const unsigned key = order_key(row[i]);
    const double w = weight_of(to_float(row[i]), d);
    bool kept = w > 0.0;
    if (kept && cut) kept = key > cutKey || (key == cutKey && tieRank++ < numTiesKept);
    if (!kept) continue;
    cumulative += w;
    lastKept = i;
    if (cumulative > target) { found = i; break; }
  }
  for (int o = 16; o > 0; o >>= 1) {
    found = min(found, __shfl_xor_sync(FULL_MASK, found, o));
    lastKept = max(lastKept, __shfl_xor_sync(FULL_MASK, lastKept, o));
  }
  __syncthreads();
  if (lane == 0) { sIdx[warp] = found; iScratch[warp] = lastKept; }
  __syncthreads();
  if (threadIdx.x == 0) {
    int f = 0x7fffffff, last = -1;
    for (int w = 0; w < (int)(blockDim.x >> 5); w++) { f = min(f, sIdx[w]); last = max(last, iScratch[w]); }
    out[r] = f != 0x7fffffff ? f : (last >= 0 ? last : greedy);
  }
}

/** The row's best (value desc, id asc) entry after `after` in that order (after = (+inf, -1): the best of all). */
template <typename T>
__device__ void best_after(const T* row, int vocab, float afterV, int afterI, float& bestV, int& bestI, float* sVal,
                           int* sIdx) {
  bestV = NEG_INF;
  bestI = 0x7fffffff;
  for_row(row, vocab, [&](T x, int i) {
    const float v = to_float(x);
    if (better(afterV, afterI, v, i) && better(v, i, bestV, bestI)) { bestV = v; bestI = i; }
  });
  block_best(bestV, bestI, sVal, sIdx);
}

/**
 * Prompt logprobs: row first + r of the logits against token targets[r], as the host's Sampler.tokenLogprob
 * computes them (raw log-softmax, log-sum-exp in double): out[r * (2 + 2 numTop)] = its logprob (f32 bits), then its
 * rank (1 + the ids of a larger logit), then numTop (id, logprob) pairs, value desc, id asc. Only these come to the
 * host, not the row. Launch: grid (rows), block 256.
 */
template <typename T>
__device__ void row_logprobs(const T* logits, int vocab, int first, const int* targets, int numTop, int* out) {
  __shared__ double dScratch[32];
  __shared__ int iScratch[32];
  __shared__ float sVal[32];
  __shared__ int sIdx[32];
  const int r = blockIdx.x;
  const T* row = logits + (long long)(first + r) * vocab;
  const int target = targets[r];
  float maxV;
  int maxI;
  best_after(row, vocab, __int_as_float(0x7f800000), -1, maxV, maxI, sVal, sIdx);
  const float targetV = to_float(row[target]);
  double z = 0.0;
  int larger = 0;
  for_row(row, vocab, [&](T x, int) {
    const float v = to_float(x);
    if (v > NEG_INF) z += exp((double)v - (double)maxV);
    if (v > targetV) larger++;
  });
  z = block_total<double>(z, dScratch);
  larger = block_total<int>(larger, iScratch);
  const double logZ = (double)maxV + log(z);
  int* o = out + (long long)r * (2 + 2 * numTop);
  if (threadIdx.x == 0) {
    o[0] = __float_as_int((float)((double)targetV - logZ));
    o[1] = 1 + larger;
  }
  float v = maxV;
  int i = maxI;
  for (int k = 0; k < numTop; k++) {
    if (k > 0) best_after(row, vocab, v, i, v, i, sVal, sIdx);
    if (threadIdx.x == 0) {
      o[2 + 2 * k] = i;
      o[3 + 2 * k] = __float_as_int((float)((double)v - logZ));
    }
  }
}

#define INSTANTIATE(suffix, T)                                                                              \
  extern "C" __global__ void __launch_bounds__(SAMPLE_THREADS)                                              \
      sample_tokens_##suffix(const T* logits, int vocab, const int* params, int stride, int* out) {         \
    pdl_begin();                                                                                            \
    sample_row<T>(logits, vocab, params, stride, out);                                                      \
  }                                                                                                         \
  extern "C" __global__ void __launch_bounds__(256) row_logprobs_##suffix(                                  \
      const T* logits, int vocab, int first, const int* targets, int numTop, int* out) {                    \
    pdl_begin();                                                                                            \
    row_logprobs<T>(logits, vocab, first, targets, numTop, out);                                            \
  }

INSTANTIATE(bf16, bf16_t)
