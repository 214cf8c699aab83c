// The decode kernel's rounds on tensor cores (the _mma builds, QUIRE_DECODE_MMA): a block's G query heads of one kv
// head are the rows of mma.sync m16n8k16 (rows G..15 zero), so S = Q K^T and O += P V cost two MMAs a 16 positions a
// k step, where the CUDA-core rounds (attention_decode.cuh) spend G x D fused multiply-adds a position on each lane
// group. At a GQA group of 8 those rounds issue ~4 instructions a byte of K/V and leave decode attention
// instruction-bound at large batches (qwen3-30b-a3b, 256 rows of ~700 positions: 13.3 ms a step, ~32% of the copy
// bandwidth; docs/perf-log.md, session 41).
//
// No shared memory and no ldmatrix: each thread loads 16 bytes of a K or V row (dims 32c + 8t .. + 7 of position
// g, g = lane / 4, t = lane % 4), and
//   - Q K^T sums a k step's 16 slots over dims permuted alike in A (Q) and B (K): slot 2t + e <-> dim
//     32c + 8t + 4h + e, slot 2t + 8 + e <-> dim 32c + 8t + 4h + 2 + e (k step (c, h)), so a loaded word is a
//     fragment register as it is;
//   - P V takes V through movmatrix.trans (an 8 x 8 matrix of b16 transposed across the warp): the matrix (c, j) of
//     8 positions holds dims {32c + 8t + 2j + e}, and after the transpose thread (g, t) holds positions 2t, 2t + 1 of
//     dim 32c + 8 (g / 2) + 2j + g % 2, a B fragment with its n dims permuted; the C fragment then gives thread (g, t)
//     head g's dims 32c + 8t + 2j + {0, 1}: dims 32c + 8t .. + 7 over j.
// P is rounded to bf16 for the MMA (as the prefill kernel's and flash-attention's); the row sums l are of the fp32 p.
// A head's sums follow its own row of the MMA and its positions alone, so the bits depend neither on G nor on the
// batch: as the CUDA-core builds, but not their bits.
#pragma once
#include "common.cuh"
#include "mma.cuh"

/** movmatrix.trans: the warp's 8 x 8 b16 matrix (thread (g, t): row g, cols 2t, 2t + 1) transposed. */
__device__ __forceinline__ unsigned movmatrix_trans(unsigned x) {
  unsigned r;
  asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;" : "=r"(r) : "r"(x));
  return r;
}

/**
 * Head g's (g < G) dims 32c + 8t .. + 7 of `q` (heads D apart, bf16: the qkv row, or the roped heads in shared
 * memory, 4-byte aligned), as words; zeros for the rows past G.
 */
template <int D, int G>
__device__ __forceinline__ void decode_mma_q(const bf16_t* q, unsigned (&qa)[D / 32][4], int lane) {
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int c = 0; c < D / 32; c++) {
#pragma unroll
    for (int i = 0; i < 4; i++) qa[c][i] = 0u;
    if (g < G) {
      const unsigned* w = reinterpret_cast<const unsigned*>(q + g * D + 32 * c + 8 * t);
#pragma unroll
      for (int i = 0; i < 4; i++) qa[c][i] = w[i];
    }
  }
}

/**
 * One warp's share of a split [begin, end): positions begin + 16 (r DECODE_WARPS + warp) .. + 15 in round r, read
 * through the page table (positions from `end` on read end - 1's and count for nothing). Ends with the warp's state
 * for each head g < G as the CUDA-core rounds leave it: ms[g], ls[g] (max, sum of exp) and accs[g * D + d] (the
 * unnormalized output), an empty warp's as m -inf, l 0.
 */
template <typename C, int D, int G>
__device__ __forceinline__ void decode_mma_walk(const unsigned (&qa)[D / 32][4], const C* kCache, const C* vCache,
                                                const int* table, int blockShift, long long slotStride, int kvh,
                                                int begin, int end, int warp, int lane, float scale, float* ms,
                                                float* ls, float* accs) {
  static_assert(sizeof(C) == 2 && G <= 8 && D % 32 == 0 && D <= 128, "bf16 caches, up to 8 heads, D 32 .. 128");
  constexpr int CH = D / 32;
  const int g = lane >> 2, t = lane & 3;
  const int pageMask = (1 << blockShift) - 1;
  float o[CH][4][4];
#pragma unroll
  for (int c = 0; c < CH; c++) {
#pragma unroll
    for (int j = 0; j < 4; j++) o[c][j][0] = o[c][j][1] = o[c][j][2] = o[c][j][3] = 0.f;
  }
  float m = NEG_INF, l = 0.f;  // head g's running max; this thread's part of its sum
  for (int p0 = begin + 16 * warp; p0 < end; p0 += 16 * DECODE_WARPS) {
    u32x4 kr[2][CH], vr[2][CH];  // positions p0 + g and p0 + 8 + g
#pragma unroll
    for (int n = 0; n < 2; n++) {
      const int j = min(p0 + 8 * n + g, end - 1);
      const long long base = (((long long)table[j >> blockShift] << blockShift) + (j & pageMask)) * slotStride +
                             (long long)kvh * D + 8 * t;
#pragma unroll
      for (int c = 0; c < CH; c++) {
        kr[n][c] = *reinterpret_cast<const u32x4*>(kCache + base + 32 * c);
        vr[n][c] = *reinterpret_cast<const u32x4*>(vCache + base + 32 * c);
      }
    }
    // S: head g's scores at positions p0 + 8n + 2t, + 1 in s[n][0], s[n][1]
    float s[2][4];
#pragma unroll
    for (int n = 0; n < 2; n++) {
      s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
#pragma unroll
      for (int c = 0; c < CH; c++) {
        const unsigned a0[4] = {qa[c][0], 0u, qa[c][1], 0u}, a1[4] = {qa[c][2], 0u, qa[c][3], 0u};
        mma_bf16_16816(s[n], a0, kr[n][c].x, kr[n][c].y);
        mma_bf16_16816(s[n], a1, kr[n][c].z, kr[n][c].w);
      }
    }
    float x[4] = {s[0][0], s[0][1], s[1][0], s[1][1]};
    const int at[4] = {p0 + 2 * t, p0 + 2 * t + 1, p0 + 8 + 2 * t, p0 + 9 + 2 * t};
    float mx = NEG_INF;
#pragma unroll
    for (int i = 0; i < 4; i++) {
      x[i] = at[i] < end ? __fmul_rn(x[i], scale) : NEG_INF;
      mx = fmaxf(mx, x[i]);
    }
    mx = fmaxf(mx, __shfl_xor_sync(FULL_MASK, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(FULL_MASK, mx, 2));
    const float mNew = fmaxf(m, mx);  // finite: p0 < end
    const float corr = __expf(m - mNew);  // 0 from an empty state
    float p[4];
#pragma unroll
    for (int i = 0; i < 4; i++) p[i] = at[i] < end ? __expf(x[i] - mNew) : 0.f;
    l = __fmaf_rn(l, corr, __fadd_rn(__fadd_rn(p[0], p[1]), __fadd_rn(p[2], p[3])));
    m = mNew;
    const unsigned pa[4] = {pack_bf16x2(p[0], p[1]), 0u, pack_bf16x2(p[2], p[3]), 0u};
#pragma unroll
    for (int c = 0; c < CH; c++) {
      const unsigned v0[4] = {vr[0][c].x, vr[0][c].y, vr[0][c].z, vr[0][c].w};
      const unsigned v1[4] = {vr[1][c].x, vr[1][c].y, vr[1][c].z, vr[1][c].w};
#pragma unroll
      for (int j = 0; j < 4; j++) {
        o[c][j][0] = __fmul_rn(o[c][j][0], corr);
        o[c][j][1] = __fmul_rn(o[c][j][1], corr);
        mma_bf16_16816(o[c][j], pa, movmatrix_trans(v0[j]), movmatrix_trans(v1[j]));
      }
    }
  }
  l = __fadd_rn(l, __shfl_xor_sync(FULL_MASK, l, 1));
  l = __fadd_rn(l, __shfl_xor_sync(FULL_MASK, l, 2));
  if (g < G) {
    if (t == 0) {
      ms[g] = m;
      ls[g] = l;
    }
#pragma unroll
    for (int c = 0; c < CH; c++) {
#pragma unroll
      for (int j = 0; j < 4; j++) {
        accs[g * D + 32 * c + 8 * t + 2 * j] = o[c][j][0];
        accs[g * D + 32 * c + 8 * t + 2 * j + 1] = o[c][j][1];
      }
    }
  }
}
