// The grouped GEMMs' shared pieces (moe.cu's mma.sync builds, moe_wgmma.cu's Hopper ones): a block's tile from
// moe_group's list, a grouped position's input row, gate_up's activation and the guarded store.
#pragma once
#include "common.cuh"

/**
 * Block y's tile from its GEMM's list (moe_group's TileList): the expert, its first grouped position, its count and the
 * tile's first token (of the expert's); false past the last tile. One load, the first of the block: before the list,
 * each warp scanned every expert's offsets for it (two dependent loads and a scan before its first weight byte).
 */
__device__ __forceinline__ bool expert_tile(const int4* tiles, int y, int& e, int& first, int& count, int& tok0) {
  const int4 t = tiles[y];
  e = t.x;
  first = t.y;
  count = t.z;
  tok0 = t.w;
  return e >= 0;
}

/** The input row index of grouped position p: its token (gate_up), or p itself (down). */
template <bool GATE_UP>
__device__ __forceinline__ int moe_token_index(const int* pairs, int topK, int p) {
  return GATE_UP ? pairs[p] / topK : p;
}

/** The input row of grouped position p. */
template <bool GATE_UP, typename E>
__device__ __forceinline__ const E* moe_token_row(const E* x, const int* pairs, int topK, int K, int p) {
  return x + (size_t)moe_token_index<GATE_UP>(pairs, topK, p) * K;
}

/** gate_up's output from its two sums: activation.cu's silu_mul, on the unrounded sums. */
__device__ __forceinline__ float moe_silu_mul(float gate, float up) { return gate / (1.f + __expf(-gate)) * up; }

template <typename Y>
__device__ __forceinline__ void moe_store(Y* y, float v, int out, int tok, int first, int count, int N) {
  if (out < N && tok < count) y[(size_t)(first + tok) * N + out] = from_float<Y>(v);
}
