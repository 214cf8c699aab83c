// attention_decode.cu's parts that are not the kernel itself: the split plan (decode-splits.ts splitPlan mirrors it),
// the lanes' raw K/V words and their conversion (bf16, FP8), and the fold of split states in split order, whether by
// the block that walks a row, the block that completes its count, or a cluster's block 0 (the same bits every way).
// Needs DECODE_CHUNK_ROUND, DECODE_SHORT_ROW_KV and DECODE_THREADS, defined by attention_decode.cu before it.
#pragma once
#include "common.cuh"

struct SplitPlan {
  int numSplits;
  int chunk;
};

__device__ __forceinline__ SplitPlan split_plan(int kvLen, int splitTokens, int longSplitTokens, int shortSplitTokens,
                                                int maxSplits) {
  if (kvLen <= 0) return SplitPlan{1, DECODE_CHUNK_ROUND};
  const int target = kvLen > 2 * splitTokens                                 ? longSplitTokens
                     : shortSplitTokens > 0 && kvLen <= DECODE_SHORT_ROW_KV ? shortSplitTokens
                                                                            : splitTokens;
  const int wanted = max(1, min(maxSplits, (kvLen + target - 1) / target));
  const int per = (kvLen + wanted - 1) / wanted;
  const int chunk = (per + DECODE_CHUNK_ROUND - 1) / DECODE_CHUNK_ROUND * DECODE_CHUNK_ROUND;
  return SplitPlan{(kvLen + chunk - 1) / chunk, chunk};
}

__device__ __forceinline__ int row_kv_len(const int* tokenToSeq, const int* positions, int t) {
  return tokenToSeq[t] < 0 ? 0 : positions[t] + 1;
}

/** Lanes of VEC elements a load (16 bytes of bf16; an FP8 cache's builds take 8 or 16 elements). */
template <int VEC, int D>
struct DecodeLanes {
  static constexpr int LPP = D / VEC < 32 ? D / VEC : 32;
  static constexpr int EPL = D / LPP;
  static constexpr int PPW = 32 / LPP;
};

/** EPL elements as raw 16-byte words (loads stay in flight until converted). */
template <int WORDS>
struct Raw {
  uint4 w[WORDS];
};

template <int WORDS, typename T>
__device__ __forceinline__ void load_raw(const T* p, Raw<WORDS>& r) {
#pragma unroll
  for (int i = 0; i < WORDS; i++) r.w[i] = reinterpret_cast<const uint4*>(p)[i];
}

template <int WORDS>
__device__ __forceinline__ void to_floats(const Raw<WORDS>& r, float* out, bf16_t) {
#pragma unroll
  for (int i = 0; i < WORDS; i++) {
    const unsigned u[4] = {r.w[i].x, r.w[i].y, r.w[i].z, r.w[i].w};
#pragma unroll
    for (int k = 0; k < 4; k++) {
      out[8 * i + 2 * k] = __uint_as_float(u[k] << 16);
      out[8 * i + 2 * k + 1] = __uint_as_float(u[k] & 0xffff0000u);
    }
  }
}

template <int WORDS>
__device__ __forceinline__ void to_floats(const Raw<WORDS>& r, float* out, float) {
#pragma unroll
  for (int i = 0; i < WORDS; i++) {
    out[4 * i] = __uint_as_float(r.w[i].x);
    out[4 * i + 1] = __uint_as_float(r.w[i].y);
    out[4 * i + 2] = __uint_as_float(r.w[i].z);
    out[4 * i + 3] = __uint_as_float(r.w[i].w);
  }
}

/**
 * EPL cache elements of type C as raw words (the loads stay in flight until converted): 16-byte words for a bf16
 * cache, 8-byte ones for an FP8 cache (the lanes, set by the compute type, hold as many elements as for bf16).
 */
template <typename C, int EPL>
struct KvRaw {
  static constexpr int WORDS = EPL * (int)sizeof(C) / 16;
  Raw<WORDS> r;
  __device__ __forceinline__ void load(const C* p) { load_raw<WORDS>(p, r); }
  __device__ __forceinline__ void to_floats_(float* out) const { to_floats<WORDS>(r, out, C()); }
};

/** Four e4m3 bytes of a word (the lowest first) to floats. */
__device__ __forceinline__ void fp8x4_to_floats(unsigned w, float* out) {
  fp8x2_to_floats((unsigned short)(w & 0xffffu), out[0], out[1]);
  fp8x2_to_floats((unsigned short)(w >> 16), out[2], out[3]);
}

template <int EPL>
struct KvRaw<fp8_t, EPL> {
  static_assert(EPL % 8 == 0, "8- or 16-byte loads of e4m3");
  static constexpr int WORDS = EPL / 4;  // 32-bit words, loaded 2 or 4 at a time
  unsigned w[WORDS];
  __device__ __forceinline__ void load(const fp8_t* p) {
    if constexpr (EPL % 16 == 0) {
#pragma unroll
      for (int i = 0; i < EPL / 16; i++) {
        const uint4 v = reinterpret_cast<const uint4*>(p)[i];
        w[4 * i] = v.x, w[4 * i + 1] = v.y, w[4 * i + 2] = v.z, w[4 * i + 3] = v.w;
      }
    } else {
#pragma unroll
      for (int i = 0; i < EPL / 8; i++) {
        const uint2 v = reinterpret_cast<const uint2*>(p)[i];
        w[2 * i] = v.x, w[2 * i + 1] = v.y;
      }
    }
  }
  __device__ __forceinline__ void to_floats_(float* out) const {
#pragma unroll
    for (int i = 0; i < WORDS; i++) fp8x4_to_floats(w[i], out + 4 * i);
  }
};

/** The factor a state of running max m and sum l takes under a new max M; an empty state (l = 0) counts 0. */
__device__ __forceinline__ float scale_of(float l, float m, float M) { return l > 0.f ? __expf(m - M) : 0.f; }

/**
 * Folds one split's state (mz, lz, oz: max, sum of exp, unnormalized output) into a running state, in
 * split order. Both ways a row's splits come together (a block that walks them all, or the block that
 * merges what other blocks published) call this with the same values in the same order, and every
 * rounding is spelled out, so the two give the same bits.
 */
template <int DPT>
__device__ __forceinline__ void fold_split(float& m, float& l, float* o, float mz, float lz, const float* oz) {
  if (!(lz > 0.f)) return;
  if (!(l > 0.f)) {
    m = mz;
    l = lz;
#pragma unroll
    for (int i = 0; i < DPT; i++) o[i] = oz[i];
    return;
  }
  const float M = fmaxf(m, mz);
  const float a = __expf(__fsub_rn(m, M)), b = __expf(__fsub_rn(mz, M));
  l = __fmaf_rn(l, a, __fmul_rn(lz, b));
#pragma unroll
  for (int i = 0; i < DPT; i++) o[i] = __fmaf_rn(o[i], a, __fmul_rn(oz[i], b));
  m = M;
}

// Clusters are sm_90's: before it no launch has them (decodeCluster), and these three are never reached.
/** This thread has arrived (release: what it wrote before is seen by those that wait), and goes on without waiting. */
__device__ __forceinline__ void cluster_arrive() {
#if __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.release;" ::: "memory");
#endif
}

/** Every thread of the cluster has arrived; what they wrote before arriving is seen (acquire). */
__device__ __forceinline__ void cluster_wait() {
#if __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.wait.acquire;" ::: "memory");
#endif
}

/** Stores v at the address `p` has in the shared memory of the cluster's block `rank`. */
__device__ __forceinline__ void cluster_store(float* p, unsigned rank, float v) {
#if __CUDA_ARCH__ >= 900
  unsigned remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(shared_addr(p)), "r"(rank));
  asm volatile("st.shared::cluster.f32 [%0], %1;" ::"r"(remote), "f"(v) : "memory");
#endif
}

/** out[d] = o / l at dims tid, tid + STRIDE, ... (DPT of them; 0 for an empty state). */
template <typename T, int D, int DPT, int STRIDE>
__device__ __forceinline__ void write_out(T* out, float l, const float* o, int tid) {
#pragma unroll
  for (int i = 0; i < DPT; i++) {
    const int d = tid + i * STRIDE;
    if (d < D) out[d] = from_float<T>(l > 0.f ? __fdiv_rn(o[i], l) : 0.f);
  }
}

/**
 * Folds a head's numSplits published states in split order and writes its output at dims tid, tid + STRIDE, ...:
 * stateO(z, d) is split z's unnormalized output at dim d, stateMl(z, 0 / 1) its max / sum (from global partials or a
 * cluster's shared memory). The states are read FB splits at a time, every load of a batch issued before its first
 * fold: one read latency a batch, not one a split (a row of 16 published splits waited 16 L2 round trips in turn).
 * Past numSplits a batch's states are empty (sum 0), which fold_split skips, so the folds and their order are those of
 * one split at a time. Every dim's fold is its own (max and sum alike in each thread), so which threads take which
 * dims (STRIDE: the block's threads, or a warp's lanes) changes no bit.
 */
template <typename T, int D, int DPT, int FB, int STRIDE, typename StateO, typename StateMl>
__device__ __forceinline__ void fold_states(T* out, int numSplits, StateO stateO, StateMl stateMl, int tid) {
  float M = NEG_INF, L = 0.f, O[DPT];
#pragma unroll
  for (int i = 0; i < DPT; i++) O[i] = 0.f;
  for (int z0 = 0; z0 < numSplits; z0 += FB) {
    float oz[FB][DPT], mz[FB], lz[FB];
#pragma unroll
    for (int b = 0; b < FB; b++) {
      const bool in = z0 + b < numSplits;
#pragma unroll
      for (int i = 0; i < DPT; i++) {
        const int d = tid + i * STRIDE;
        oz[b][i] = in && d < D ? stateO(z0 + b, d) : 0.f;
      }
      mz[b] = in ? stateMl(z0 + b, 0) : NEG_INF;
      lz[b] = in ? stateMl(z0 + b, 1) : 0.f;
    }
#pragma unroll
    for (int b = 0; b < FB; b++) fold_split<DPT>(M, L, O, mz[b], lz[b], oz[b]);
  }
  write_out<T, D, DPT, STRIDE>(out, L, O, tid);
}
