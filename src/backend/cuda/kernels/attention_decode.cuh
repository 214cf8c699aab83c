// The decode attention kernel's body (attention_decode.cu describes it and builds it): a block's row, heads and split
// plan, the rope fused for decode-only steps, the rounds over K and V, the warps' and splits' states, and the fold of a
// row's splits (walked, through a cluster, or published and merged). Needs attention_decode.cu's DECODE_SLOTS and
// DECODE_THREADS and the kernel defines (DECODE_FOLD_BATCH, DECODE_MAX_CLUSTER, ...) before it.
#pragma once
#include "common.cuh"
#include "attention_decode_mma.cuh"
#include "decode_state.cuh"
#include "rope.cuh"

template <typename T, typename C, int D, int G, int VEC = 16 / (int)sizeof(T), bool PDL = false, bool EARLY = false,
          bool PRE = false, bool PIPE = false, int HG = 1, bool MMA = false>
__device__ __forceinline__ void attention_decode(const T* qkv, const C* kCache, const C* vCache, T* out,
                                                 float* partialOut, float* partialMl, int* rowCounters,
                                                 const int* meta, const int* blockTables, const int* tokenToSeq,
                                                 const int* positions, int numHeads, int numKvHeads, int blockShift,
                                                 float scale, int splitTokens, int longSplitTokens,
                                                 int shortSplitTokens, int maxSplits,
                                                 int qHeadsPerKv, int bx, int t, int slot, int bz, int gx, int gz,
                                                 const float* ropeTable = nullptr, const T* qNorm = nullptr,
                                                 const T* kNorm = nullptr, const int* slotMapping = nullptr,
                                                 float eps = 0.f, int ropePairs = D / 2) {
  using Lanes = DecodeLanes<VEC, D>;
  constexpr int EPL = Lanes::EPL, LPP = Lanes::LPP, PPW = Lanes::PPW;
  constexpr int ROUND = DECODE_WARPS * DECODE_SLOTS * PPW;
  constexpr int DPT = (D + DECODE_THREADS - 1) / DECODE_THREADS;  // output dims per thread
  // HG > 1 (the _hg builds, G 1 only): the block is HG blocks of DECODE_THREADS side by side, sub-block hg serving head
  // bx HG + hg with its own shared memory and barrier, exactly as a block of its own would; only the L1 is shared, where
  // the HG heads' identical K and V loads meet (one read from L2 for the group's heads instead of HG). At HG 1, hg is
  // the constant 0, TID threadIdx.x and SUB_SYNC __syncthreads: the code of the plain builds.
  static_assert(HG == 1 || (G == 1 && !PRE), "head groups are G 1 blocks side by side, without clusters");
  // MMA (the _mma builds): the rounds on tensor cores (attention_decode_mma.cuh), bf16 only, no early or L2 reads
  static_assert(!MMA || (sizeof(T) == 2 && sizeof(C) == 2 && HG == 1 && !PRE && !EARLY && !PIPE), "plain _mma builds");
  const int hg = HG > 1 ? (int)threadIdx.x / DECODE_THREADS : 0;
#define TID (HG > 1 ? threadIdx.x % DECODE_THREADS : threadIdx.x)
#define SUB_SYNC()                                                                     \
  do {                                                                                 \
    if constexpr (HG == 1) {                                                           \
      __syncthreads();                                                                 \
    } else {                                                                           \
      asm volatile("bar.sync %0, %1;" ::"r"(1 + hg), "r"(DECODE_THREADS) : "memory"); \
    }                                                                                  \
  } while (0)
  if constexpr (HG > 1) {
    bx = bx * HG + hg;
    gx = gx * HG;
  }
  __shared__ float warpMs[HG][DECODE_WARPS][G], warpLs[HG][DECODE_WARPS][G];
  __shared__ float warpAccs[HG][DECODE_WARPS][G][D];
  __shared__ int mergeHeres[HG];
  // splits a fold reads at once (fold_states; DECODE_FOLD_BATCH, QUIRE_DECODE_FOLD_BATCH): at most 4 for groups of
  // 4 or more and 2 where G DPT >= 16, whose q heads hold more registers (G 8 at D 256 spilled at 4; ptxas -v)
  constexpr int FOLD_CAP = G * DPT >= 16 ? 2 : G >= 4 ? 4 : 8;
  constexpr int FOLD_BATCH = DECODE_FOLD_BATCH < FOLD_CAP ? DECODE_FOLD_BATCH : FOLD_CAP;
  const int h0 = bx * G, kvh = h0 / qHeadsPerKv;
  const int lane = TID & 31, warp = TID >> 5;
  const int group = lane / LPP, dim0 = (lane % LPP) * EPL;
  const int seq = tokenToSeq[t];
  const int kvLen = row_kv_len(tokenToSeq, positions, t);
  const SplitPlan plan = split_plan(kvLen, splitTokens, longSplitTokens, shortSplitTokens, maxSplits);
  // A short row whose splits outnumber the grid's blocks for it (a full batch) is walked by one block: spread over
  // a few blocks its small splits would each be published for a merge. The same fold either way.
  const int rowZ = shortSplitTokens > 0 && kvLen <= DECODE_SHORT_ROW_KV && plan.numSplits > gz ? 1 : gz;
  // CLUSTERS (a _pre build launched in clusters of the grid's z, attention-launch.ts): a row of 2 to gz splits, one
  // a block, folds them in block 0 instead of publishing them for the last block to finish: each block stores its
  // split's state into block 0's shared memory and arrives at the cluster's barrier, block 0 waits for every block,
  // those without a split too, and folds; the others leave once they have arrived
  unsigned clusterSize = 1;
#if __CUDA_ARCH__ >= 900
  if constexpr (PRE) asm("mov.u32 %0, %%cluster_nctarank;" : "=r"(clusterSize));
#endif
  const bool viaCluster = clusterSize > 1 && plan.numSplits > 1 && plan.numSplits <= gz;
  if (bz >= min(plan.numSplits, rowZ)) {
    if (viaCluster) cluster_arrive();
    return;
  }
  const int stride = meta[META_BLOCK_TABLE_STRIDE];
  const int* table = blockTables + (long long)max(seq, 0) * stride;
  const int pageMask = (1 << blockShift) - 1;
  const long long slotStride = (long long)numKvHeads * D;
  const long long kvSlot = ropeTable != nullptr ? slotMapping[t] : -1;
  // rope items (fused rope): the G q heads, and the new k (and v) by the blocks of the row's last split
  const int items = G + (kvSlot >= 0 && (plan.numSplits - 1 - bz) % rowZ == 0 ? 1 : 0);
  // A round of K and V from position j0 (positions from `end` on read end - 1's, and count for nothing)
  auto load_round = [&](int j0, int end, KvRaw<C, EPL>(&kr)[DECODE_SLOTS], KvRaw<C, EPL>(&vr)[DECODE_SLOTS]) {
#pragma unroll
    for (int u = 0; u < DECODE_SLOTS; u++) {
      const int jc = min(j0 + (u * DECODE_WARPS + warp) * PPW + group, end - 1);
      const long long page = table[jc >> blockShift];
      const long long base = ((page << blockShift) + (jc & pageMask)) * slotStride + (long long)kvh * D + dim0;
      kr[u].load(kCache + base);
      vr[u].load(vCache + base);
    }
  };
  // PRE: the block's first split's K and V (but the row's new token, which the kernel before or this one's rope
  // writes) asked of L2 before the wait, so that the rounds after it find them there; no register, no shared memory
  if constexpr (PRE) {
    constexpr int LINES = D * (int)sizeof(C) / 128;  // 128-byte lines of a position's K (and of its V)
    const int begin0 = bz * plan.chunk, end0 = min(kvLen - 1, begin0 + plan.chunk);
    for (int p = TID; p < (end0 - begin0) * LINES; p += DECODE_THREADS) {
      const int j = begin0 + p / LINES;
      const long long page = table[j >> blockShift];
      const long long base = ((page << blockShift) + (j & pageMask)) * slotStride + (long long)kvh * D +
                             p % LINES * (128 / (int)sizeof(C));
      asm volatile("prefetch.global.L2 [%0];" ::"l"(kCache + base));
      asm volatile("prefetch.global.L2 [%0];" ::"l"(vCache + base));
    }
  }
  // EARLY: the block's first round of K and V, when it holds no position the kernels before or this one write (the
  // row's new token is the last), and its warp's first rope item's norm weights and angles, read before the wait
  KvRaw<C, EPL> kr0[DECODE_SLOTS], vr0[DECODE_SLOTS];
  RopeConsts rc0;
  int early0 = -1;
  if constexpr (EARLY) {
    const int begin0 = bz * plan.chunk, end0 = min(kvLen, begin0 + plan.chunk);
    if (min(end0, begin0 + ROUND) <= kvLen - 1) {
      early0 = begin0;
      load_round(begin0, end0, kr0, vr0);
    }
    if (ropeTable != nullptr && warp < items) {
      rope_consts<T>(warp < G ? qNorm : kNorm, ropeTable + (long long)t * D, ropeTable + (long long)t * D + D / 2, D,
                     ropePairs, rc0);
    }
  }
  // PDL (a dependent launch): the step's metadata above was written before the kernel before began, and the cache
  // rows read early by earlier steps; its qkv, and the partials the kernels before wrote, are read only after it
  if constexpr (PDL) pdl_begin();

  float qf[G][EPL];
  unsigned qa[MMA ? D / 32 : 1][4];  // MMA: the G heads' q as A fragment words (decode_mma_q)
  if (ropeTable == nullptr) {
    if constexpr (MMA) {
      decode_mma_q<D, G>(qkv + (long long)t * (numHeads + 2 * numKvHeads) * D + (long long)h0 * D, qa, lane);
    } else {
#pragma unroll
      for (int g = 0; g < G; g++) {
        const T* q = qkv + (long long)t * (numHeads + 2 * numKvHeads) * D + (long long)(h0 + g) * D + dim0;
#pragma unroll
        for (int e = 0; e < EPL; e++) qf[g][e] = __fmul_rn(to_float(q[e]), scale);
      }
    }
  } else {
    // Fused qk-norm + rope (a decode-only step; rope.cu's kernel not launched): the block ropes its G q heads into
    // shared memory (warpAcc's, unused until the first split ends), and the blocks of the row's last split (the
    // one holding the new position) write its roped k and its v to the cache first. Blocks of other query heads
    // of the kv head write the same bytes; each reads the slot only after its own write.
    T* qs = reinterpret_cast<T*>(&warpAccs[hg][0][0][0]);
    const T* row = qkv + (long long)t * (numHeads + 2 * numKvHeads) * D;
    const float* cosRow = ropeTable + (long long)t * D;
    auto rope_items = [&](int rotPairs) {
      for (int item = warp; item < items; item += DECODE_WARPS) {
        const RopeConsts* rc = EARLY && item == warp ? &rc0 : nullptr;
        if (item < G) {
          rope_head<T, C>(row + (long long)(h0 + item) * D, qs + item * D, qNorm, cosRow, cosRow + D / 2, D, rotPairs,
                          eps, nullptr, nullptr, nullptr, rc);
        } else {
          const T* k = row + (long long)(numHeads + kvh) * D;
          const long long at = (kvSlot * numKvHeads + kvh) * D;
          rope_head<T, C>(k, nullptr, kNorm, cosRow, cosRow + D / 2, D, rotPairs, eps, const_cast<C*>(kCache) + at,
                          const_cast<C*>(vCache) + at, k + (long long)numKvHeads * D, rc);
        }
      }
    };
    // A whole-head rotation (most models) as a constant: its pairs' elements fold to fixed offsets, where partial
    // rotary's computed ones would cost the G 4 and 8 builds registers (spills); the same bits either way.
    if (ropePairs == D / 2) {
      rope_items(D / 2);
    } else {
      rope_items(ropePairs);
    }
    SUB_SYNC();
    if constexpr (MMA) {
      decode_mma_q<D, G>(qs, qa, lane);
    } else {
#pragma unroll
      for (int g = 0; g < G; g++) {
#pragma unroll
        for (int e = 0; e < EPL; e++) qf[g][e] = __fmul_rn(to_float(qs[g * D + dim0 + e]), scale);
      }
    }
    SUB_SYNC();  // warpAcc is written after the first split
  }

  // A block walks every split of its row when the grid gives the row one block (or the row has one split):
  // it folds each split's state into a running one as it goes (max and sum in registers, the output in
  // shared memory, each thread its own dims), with no global traffic.
  const bool walk = rowZ == 1 || plan.numSplits == 1;
  __shared__ float runOs[HG][G][DPT][DECODE_THREADS];
  float runM[G], runL[G];
#pragma unroll
  for (int g = 0; g < G; g++) {
    runM[g] = NEG_INF;
    runL[g] = 0.f;
  }

  for (int split = bz; split < plan.numSplits; split += rowZ) {
    const int begin = split * plan.chunk;
    const int end = min(kvLen, begin + plan.chunk);
    if constexpr (MMA) {
      decode_mma_walk<C, D, G>(qa, kCache, vCache, table, blockShift, slotStride, kvh, begin, end, warp, lane, scale,
                               &warpMs[hg][warp][0], &warpLs[hg][warp][0], &warpAccs[hg][warp][0][0]);
    } else {
      float m[G], l[G], acc[G][EPL];
#pragma unroll
      for (int g = 0; g < G; g++) {
        m[g] = NEG_INF;
        l[g] = 0.f;
#pragma unroll
        for (int e = 0; e < EPL; e++) acc[g][e] = 0.f;
      }
      // A round's K and V from position j: the registers read before the wait where they hold it (EARLY), else loads
      auto take_round = [&](int j, KvRaw<C, EPL>(&kr)[DECODE_SLOTS], KvRaw<C, EPL>(&vr)[DECODE_SLOTS]) {
        if (EARLY && j == early0) {
#pragma unroll
          for (int u = 0; u < DECODE_SLOTS; u++) {
            kr[u] = kr0[u];
            vr[u] = vr0[u];
          }
        } else {
          load_round(j, end, kr, vr);
        }
      };
      // PIPE: the next round's K and V are asked for before this round's sums (kn, vn), the same sums in the same order
      KvRaw<C, EPL> kn[DECODE_SLOTS], vn[DECODE_SLOTS];
      if constexpr (PIPE) take_round(begin, kn, vn);
      for (int j0 = begin; j0 < end; j0 += ROUND) {
        KvRaw<C, EPL> kr[DECODE_SLOTS], vr[DECODE_SLOTS];
        bool valid[DECODE_SLOTS];
#pragma unroll
        for (int u = 0; u < DECODE_SLOTS; u++) valid[u] = j0 + (u * DECODE_WARPS + warp) * PPW + group < end;
        if constexpr (PIPE) {
#pragma unroll
          for (int u = 0; u < DECODE_SLOTS; u++) {
            kr[u] = kn[u];
            vr[u] = vn[u];
          }
          if (j0 + ROUND < end) load_round(j0 + ROUND, end, kn, vn);
        } else {
          take_round(j0, kr, vr);
        }
        float s[DECODE_SLOTS][G];
#pragma unroll
        for (int u = 0; u < DECODE_SLOTS; u++) {
          float kf[EPL];
          kr[u].to_floats_(kf);
#pragma unroll
          for (int g = 0; g < G; g++) {
            float dot = 0.f;
#pragma unroll
            for (int e = 0; e < EPL; e++) dot = __fmaf_rn(qf[g][e], kf[e], dot);
            s[u][g] = dot;
          }
        }
#pragma unroll
        for (int o = LPP / 2; o > 0; o >>= 1) {
#pragma unroll
          for (int u = 0; u < DECODE_SLOTS; u++) {
#pragma unroll
            for (int g = 0; g < G; g++) s[u][g] += __shfl_xor_sync(FULL_MASK, s[u][g], o);
          }
        }
#pragma unroll
        for (int g = 0; g < G; g++) {
          float mNew = m[g];
#pragma unroll
          for (int u = 0; u < DECODE_SLOTS; u++) if (valid[u]) mNew = fmaxf(mNew, s[u][g]);
          const float corr = mNew == NEG_INF ? 1.f : __expf(m[g] - mNew);
          l[g] = __fmul_rn(l[g], corr);
#pragma unroll
          for (int e = 0; e < EPL; e++) acc[g][e] = __fmul_rn(acc[g][e], corr);
          m[g] = mNew;
        }
#pragma unroll
        for (int u = 0; u < DECODE_SLOTS; u++) {
          float vf[EPL];
          vr[u].to_floats_(vf);
#pragma unroll
          for (int g = 0; g < G; g++) {
            const float p = valid[u] ? __expf(s[u][g] - m[g]) : 0.f;
            l[g] = __fadd_rn(l[g], p);
#pragma unroll
            for (int e = 0; e < EPL; e++) acc[g][e] = __fmaf_rn(p, vf[e], acc[g][e]);
          }
        }
      }
      // lane groups of the warp -> one state per warp (butterfly: every group ends with the total)
#pragma unroll
      for (int o = LPP; o < 32; o <<= 1) {
#pragma unroll
        for (int g = 0; g < G; g++) {
          const float mo = __shfl_xor_sync(FULL_MASK, m[g], o);
          const float lo = __shfl_xor_sync(FULL_MASK, l[g], o);
          const float M = fmaxf(m[g], mo);
          const float a = scale_of(l[g], m[g], M), b = scale_of(lo, mo, M);
          l[g] = __fmaf_rn(l[g], a, __fmul_rn(lo, b));
#pragma unroll
          for (int e = 0; e < EPL; e++) {
            acc[g][e] = __fmaf_rn(acc[g][e], a, __fmul_rn(__shfl_xor_sync(FULL_MASK, acc[g][e], o), b));
          }
          m[g] = M;
        }
      }
      if (group == 0) {
#pragma unroll
        for (int g = 0; g < G; g++) {
          if (lane == 0) { warpMs[hg][warp][g] = m[g]; warpLs[hg][warp][g] = l[g]; }
#pragma unroll
          for (int e = 0; e < EPL; e++) warpAccs[hg][warp][g][dim0 + e] = acc[g][e];
        }
      }
    }
    SUB_SYNC();

    // warps -> this split's state (max, sum, unnormalized output at this thread's dims)
    float pM[G], pL[G], pO[G][DPT];
#pragma unroll
    for (int g = 0; g < G; g++) {
      float M = NEG_INF;
      for (int w = 0; w < DECODE_WARPS; w++) if (warpLs[hg][w][g] > 0.f) M = fmaxf(M, warpMs[hg][w][g]);
      float L = 0.f;
      for (int w = 0; w < DECODE_WARPS; w++) if (warpLs[hg][w][g] > 0.f) L = __fmaf_rn(warpLs[hg][w][g], __expf(warpMs[hg][w][g] - M), L);
      pM[g] = M;
      pL[g] = L;
#pragma unroll
      for (int i = 0; i < DPT; i++) {
        const int d = TID + i * DECODE_THREADS;
        float o = 0.f;
        if (d < D) {
          for (int w = 0; w < DECODE_WARPS; w++) {
            if (warpLs[hg][w][g] > 0.f) o = __fmaf_rn(warpAccs[hg][w][g][d], __expf(warpMs[hg][w][g] - M), o);
          }
        }
        pO[g][i] = o;
      }
    }
    if (walk) {  // this block holds every split of the row: fold as it goes, write after the last
#pragma unroll
      for (int g = 0; g < G; g++) {
        float o[DPT];
#pragma unroll
        for (int i = 0; i < DPT; i++) o[i] = runOs[hg][g][i][TID];
        fold_split<DPT>(runM[g], runL[g], o, pM[g], pL[g], pO[g]);
        if (split == plan.numSplits - 1) {
          write_out<T, D, DPT, DECODE_THREADS>(out + ((long long)t * numHeads + h0 + g) * D, runL[g], o, TID);
        }
#pragma unroll
        for (int i = 0; i < DPT; i++) runOs[hg][g][i][TID] = o[i];
      }
    } else if (viaCluster) {  // one split a block of the cluster: block 0 folds them in order from its shared memory
      __shared__ float clusterO[DECODE_MAX_CLUSTER][G][D], clusterMl[DECODE_MAX_CLUSTER][G][2];
#pragma unroll
      for (int g = 0; g < G; g++) {
#pragma unroll
        for (int i = 0; i < DPT; i++) {
          const int d = TID + i * DECODE_THREADS;
          if (d < D) cluster_store(&clusterO[bz][g][d], 0, pO[g][i]);
        }
        if (TID == 0) {
          cluster_store(&clusterMl[bz][g][0], 0, pM[g]);
          cluster_store(&clusterMl[bz][g][1], 0, pL[g]);
        }
      }
      cluster_arrive();
      if (bz > 0) return;  // one split a block: nothing after it
      cluster_wait();
#pragma unroll
      for (int g = 0; g < G; g++) {
        fold_states<T, D, DPT, FOLD_BATCH, DECODE_THREADS>(out + ((long long)t * numHeads + h0 + g) * D,
            plan.numSplits, [&](int z, int d) { return clusterO[z][g][d]; },
            [&](int z, int k) { return clusterMl[z][g][k]; }, TID);
      }
    } else {  // splits spread over blocks: publish this one; the block that completes the row's count folds them
#pragma unroll
      for (int g = 0; g < G; g++) {
        const long long row = (long long)slot * numHeads + h0 + g;
#pragma unroll
        for (int i = 0; i < DPT; i++) {
          const int d = TID + i * DECODE_THREADS;
          if (d < D) partialOut[(row * maxSplits + split) * D + d] = pO[g][i];
        }
        if (TID == 0) {
          partialMl[(row * maxSplits + split) * 2] = pM[g];
          partialMl[(row * maxSplits + split) * 2 + 1] = pL[g];
        }
      }
      __threadfence();
      SUB_SYNC();
      if (TID == 0) {
        int* counter = rowCounters + (long long)slot * gx + bx;
        mergeHeres[hg] = atomicAdd(counter, 1) == plan.numSplits - 1;
        if (mergeHeres[hg]) *counter = 0;
      }
      SUB_SYNC();
      if (mergeHeres[hg]) {
        __threadfence();
        if constexpr (G > 1 && DECODE_FOLD_BATCH > 1) {
          // a warp a head: the G folds side by side, not one after another, a lane 1/32 of the head's dims
          constexpr int WDPT = (D + 31) / 32, WFB = D >= 256 ? 2 : 4;
          for (int g = warp; g < G; g += DECODE_WARPS) {
            const long long row = (long long)slot * numHeads + h0 + g;
            fold_states<T, D, WDPT, WFB, 32>(out + ((long long)t * numHeads + h0 + g) * D, plan.numSplits,
                [&](int z, int d) { return __ldcg(partialOut + (row * maxSplits + z) * D + d); },
                [&](int z, int k) { return __ldcg(partialMl + (row * maxSplits + z) * 2 + k); }, lane);
          }
        } else {
#pragma unroll
          for (int g = 0; g < G; g++) {
            const long long row = (long long)slot * numHeads + h0 + g;
            fold_states<T, D, DPT, FOLD_BATCH, DECODE_THREADS>(out + ((long long)t * numHeads + h0 + g) * D,
                plan.numSplits, [&](int z, int d) { return __ldcg(partialOut + (row * maxSplits + z) * D + d); },
                [&](int z, int k) { return __ldcg(partialMl + (row * maxSplits + z) * 2 + k); }, TID);
          }
        }
      }
    }
    SUB_SYNC();  // warpM/warpL/warpAcc and mergeHere are rewritten by the block's next split
  }
#undef TID
#undef SUB_SYNC
}

