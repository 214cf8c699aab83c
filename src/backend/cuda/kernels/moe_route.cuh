// moe.cu's routing and grouping as device functions (its moe_route, moe_group and moe_router_fused kernels call
// them): expert parallelism's slot map, one row's softmax and top k by a warp, and one block's grouping of the pairs
// by expert with the GEMMs' tile lists. Needs MOE_ROUTE_PER_LANE, defined by moe.cu's build before it.
#pragma once
#include "common.cuh"

/**
 * Expert parallelism's map of a global expert to this rank's slot (loader/types.ts LocalExperts): slot j < count holds
 * expert first + j stride; any other expert is -1. Without expert parallelism (0, 1, E): the identity.
 */
struct LocalMap {
  int first, stride, count;
  __device__ __forceinline__ int slot(int e) const {
    const int d = e - first;
    if (d < 0 || d % stride != 0) return -1;
    const int j = d / stride;
    return j < count ? j : -1;
  }
};

/** A logit as L2 holds it: moe_router_fused's last block reads what other blocks wrote in the same launch. */
__device__ __forceinline__ float load_logit(const bf16_t* p) {
  unsigned short bits;
  asm volatile("ld.global.cg.u16 %0, [%1];" : "=h"(bits) : "l"(p));
  return to_float(bf16_t{bits});
}

// Row t's routing by one warp, lane l holding experts l, l + 32, ... The top k compare the logits themselves (exp is
// increasing, so the order is the probabilities', ties included): routeTokens' choice, which compares the
// probabilities in double.
__device__ __forceinline__ void route_row(const bf16_t* logits, int* topExperts, float* topWeights, int t, int E,
                                          int topK, int renormalize, LocalMap local) {
  const int lane = threadIdx.x & 31;
  const bf16_t* row = logits + (size_t)t * E;
  float v[MOE_ROUTE_PER_LANE];
  float mx = NEG_INF;
#pragma unroll
  for (int i = 0; i < MOE_ROUTE_PER_LANE; i++) {
    const int e = lane + 32 * i;
    v[i] = e < E ? load_logit(row + e) : NEG_INF;
    mx = fmaxf(mx, v[i]);
  }
  mx = warp_max(mx);
  float sum = 0.f;
#pragma unroll
  for (int i = 0; i < MOE_ROUTE_PER_LANE; i++)
    if (lane + 32 * i < E) sum += expf(v[i] - mx);
  sum = warp_sum(sum);
  unsigned taken = 0;  // bit i: expert lane + 32 i is chosen
  int myExpert = 0;
  float myProb = 0.f;
  float picked = 0.f;
  for (int j = 0; j < topK; j++) {
    float bv = 0.f;
    int be = -1;
#pragma unroll
    for (int i = 0; i < MOE_ROUTE_PER_LANE; i++) {
      const int e = lane + 32 * i;
      if (e < E && !((taken >> i) & 1u) && (be < 0 || v[i] > bv)) {
        bv = v[i];
        be = e;
      }
    }
    // the warp's argmax: the larger logit, on a tie the lower expert (be < 0: nothing left on that lane)
    for (int o = 16; o > 0; o >>= 1) {
      const float ov = __shfl_xor_sync(FULL_MASK, bv, o);
      const int oe = __shfl_xor_sync(FULL_MASK, be, o);
      if (oe >= 0 && (be < 0 || ov > bv || (ov == bv && oe < be))) {
        bv = ov;
        be = oe;
      }
    }
    if ((be & 31) == lane) taken |= 1u << (be >> 5);
    const float p = expf(bv - mx);
    picked += p;
    if (lane == j) {
      myExpert = be;
      myProb = p;
    }
  }
  if (lane < topK) {
    topExperts[(size_t)t * topK + lane] = local.slot(myExpert);
    topWeights[(size_t)t * topK + lane] = myProb / (renormalize ? picked : sum);
  }
}

/** An exclusive scan of v over a warp's lanes, after `base`; base moves past the warp's total. */
__device__ __forceinline__ int warp_exclusive_scan(int v, int& base) {
  const int lane = threadIdx.x & 31;
  int incl = v;
  for (int o = 1; o < 32; o <<= 1) {
    const int up = __shfl_up_sync(FULL_MASK, incl, o);
    if (lane >= o) incl += up;
  }
  const int excl = base + incl - v;
  base += __shfl_sync(FULL_MASK, incl, 31);
  return excl;
}

/**
 * Where a grouped GEMM of token tiles of `bn` finds its blocks' work: entry y (int4) of `list` is (expert, its first
 * grouped position, its count, the tile's first token of the expert's), experts in order, an expert's tiles in order;
 * (-1, 0, 0, 0) from the last tile to `entries` (the GEMM's grid y, moe-plan.ts maxExpertTiles). moe-plan.ts
 * expertTileList is the same list on the host. `bn` 0: no list.
 */
struct TileList {
  int4* list;
  int bn, entries;
};

// The grouping by one block (any multiple of 32 threads) with 3 E + 2 ints of shared memory at `cursor`: counts, their
// exclusive scan to offsets, each pair's slot; and the two GEMMs' tile lists (the same list twice where their tiles
// match: b.bn 0). E: the local experts; a pair of expert -1 (another rank's) is counted nowhere, its pos -1.
__device__ __forceinline__ void group_pairs(const int* topExperts, int* offsets, int* pairs, int* pos, int P, int E,
                                            int* cursor, TileList a, TileList b) {
  int* tileBase[2] = {cursor + E, cursor + 2 * E + 1};  // each list's first entry of expert e; [E]: the tiles in all
  for (int e = threadIdx.x; e < E; e += blockDim.x) cursor[e] = 0;
  __syncthreads();
  for (int i = threadIdx.x; i < P; i += blockDim.x)
    if (topExperts[i] >= 0) atomicAdd(&cursor[topExperts[i]], 1);
  __syncthreads();
  if (threadIdx.x < 32) {
    const int lane = threadIdx.x;
    int base = 0, baseA = 0, baseB = 0;
    for (int c = 0; c < E; c += 32) {
      const int n = c + lane < E ? cursor[c + lane] : 0;
      const int off = warp_exclusive_scan(n, base);
      const int tA = warp_exclusive_scan(a.bn > 0 ? (n + a.bn - 1) / max(a.bn, 1) : 0, baseA);
      const int tB = warp_exclusive_scan(b.bn > 0 ? (n + b.bn - 1) / max(b.bn, 1) : 0, baseB);
      if (c + lane < E) {
        cursor[c + lane] = offsets[c + lane] = off;
        tileBase[0][c + lane] = tA;
        tileBase[1][c + lane] = tB;
      }
    }
    if (lane == 0) {
      offsets[E] = base;
      tileBase[0][E] = baseA;
      tileBase[1][E] = baseB;
    }
  }
  __syncthreads();
  // the lists first: they read the offsets from memory (this block's writes, visible after the sync), as the loop
  // after them moves the cursors
  const TileList lists[2] = {a, b};
#pragma unroll
  for (int l = 0; l < 2; l++) {
    const TileList t = lists[l];
    if (t.bn <= 0) continue;
    for (int e = threadIdx.x; e < E; e += blockDim.x) {
      const int first = offsets[e], count = offsets[e + 1] - first;
      for (int j = 0, y = tileBase[l][e]; j * t.bn < count; j++, y++) t.list[y] = make_int4(e, first, count, j * t.bn);
    }
    for (int y = tileBase[l][E] + threadIdx.x; y < t.entries; y += blockDim.x) t.list[y] = make_int4(-1, 0, 0, 0);
  }
  for (int i = threadIdx.x; i < P; i += blockDim.x) {
    const int e = topExperts[i];
    const int p = e >= 0 ? atomicAdd(&cursor[e], 1) : -1;
    if (p >= 0) pairs[p] = i;
    pos[i] = p;
  }
}

