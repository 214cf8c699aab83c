// Paged attention for query chunks (prefill, chunked prefill, mixed batches) on
// tensor cores, flash-attention-2 style: each block takes BQ = 64 (PREFILL_TILE_ROWS) consecutive
// query rows of one sequence and HP q heads of one kv head, walks the sequence's
// kv positions [0, its last row's position] in tiles of BK read through the block
// table (cached prefix and this chunk alike: the chunk's k/v were written to the
// cache first), S = Q K^T and O += P V on mma.sync m16n8k16 (bf16 in, fp32 out),
// causal per row, online softmax in fp32 registers, O / l at the end. K/V tiles
// arrive by cp.async, double-buffered: tile i+1 loads while tile i computes; the
// HP heads' warps share them (GQA: HP times fewer tile loads a head).
//
//   tiles[2i] = sequence, tiles[2i+1] = first flat row of the tile; rows past queryStartLoc[seq+1] idle.
//   warp w owns rows 16 (w % 4) .. +15 of head blockIdx.y HP + w / 4: its Q as A fragments (in registers,
//   loaded once, or with QS read from shared memory k step by k step), its S [16, BK] and O [16, D] as C
//   fragments; thread (g, t) holds rows g and g+8 (mma.cuh pictures them).
//   shared (dynamic): sK, sV [STAGES][BK][D + 8] bf16, then with QS sQ [HP][BQ][D + 8]; the padding puts
//   the 8 rows of an ldmatrix on distinct banks; keys past the tile's kvEnd are zeros (P is 0 there, and
//   0 * NaN would not be).
//
// Shapes: qkv [numTokens, (numHeads + 2 numKvHeads) D]; caches [numBlocks, blockSize, numKvHeads, D];
//   out [numTokens, numHeads D].
// An FP8 cache (C = fp8_t, the _fp8 builds): its tiles arrive by cp.async as they are (a byte a key dim) into
//   sK8, sV8 [STAGES][BK][D], and the block widens the tile it is about to compute into one bf16 sK, sV tile (e4m3
//   values are bf16 values: the widening is exact), so the mma path is the bf16 one.
// Launch (attention-launch.ts prefillKernelShape): grid (numTiles, numHeads / HP), block 128 HP, the
//   shared bytes above; tiles packed PREFILL_TILE_ROWS = BQ rows (step-meta.ts, a #define from kernel-defines.ts).
// Blocks take tiles last to first, so the long tiles at the end of each sequence start first.
#include "common.cuh"
#include "mma.cuh"

/** Eight e4m3 values (8 bytes, the first lowest) as eight bf16 (16 bytes): exact. */
__device__ __forceinline__ u32x4 widen_fp8x8(uint2 w) {
  float f[8];
  fp8x2_to_floats((unsigned short)(w.x & 0xffffu), f[0], f[1]);
  fp8x2_to_floats((unsigned short)(w.x >> 16), f[2], f[3]);
  fp8x2_to_floats((unsigned short)(w.y & 0xffffu), f[4], f[5]);
  fp8x2_to_floats((unsigned short)(w.y >> 16), f[6], f[7]);
  return u32x4{pack_bf16x2(f[0], f[1]), pack_bf16x2(f[2], f[3]), pack_bf16x2(f[4], f[5]), pack_bf16x2(f[6], f[7])};
}

/**
 * BQ query rows of HP query heads per block, one warp per 16 rows of a head (the launch gives BQ * 2 * HP
 * threads); the HP heads share one kv head, whose K/V tiles in shared memory serve them all. K/V tiles of
 * BK keys, STAGES of them in flight (cp.async: tiles i+1 .. i+STAGES-1 load while tile i computes). QS: the
 * warps' Q rows in shared memory, read as A fragments k step by k step, instead of registers.
 * Every row sees the same arithmetic in the same order whatever HP and QS are (tile by tile of BK keys:
 * S, max, rescale, P, O += P V, each mma chain in k order), so the bits do not depend on them (the GPU
 * tests compare the instantiations bit for bit and pin the engine's digests: the compiler's fused multiply-adds
 * follow the code's shape, so a reshaped kernel can change bits: docs/perf-log.md, session 13).
 * Dynamic shared memory: (2 STAGES BK + QS HP BQ) (D + 8) bf16 (attention-launch.ts computes the same).
 */
template <typename C, int D, int BQ, int BK, int STAGES, int HP, bool QS>
__device__ __forceinline__ void attention_prefill_mma(const bf16_t* qkv, const C* kCache, const C* vCache,
                                                      bf16_t* out, const int* meta, const int* blockTables,
                                                      const int* tiles, const int* queryStartLoc, const int* positions,
                                                      int numHeads, int numKvHeads, int blockSize, float scale) {
  constexpr int ROW = D + 8;
  constexpr int KSTEPS = D / 16;  // k steps of Q K^T
  constexpr int NKEY = BK / 8;    // n tiles of S
  constexpr int NDIM = D / 8;     // n tiles of O
  constexpr int VECS_PER_ROW = D / 8;
  constexpr int NUM_THREADS = BQ * 2 * HP;
  constexpr int VECS_PER_THREAD = BK * VECS_PER_ROW / NUM_THREADS;
  static_assert(VECS_PER_THREAD * NUM_THREADS == BK * VECS_PER_ROW, "whole 16-byte vectors of a K/V tile per thread");
  static_assert(BK % 16 == 0 && KSTEPS % 2 == 0 && NDIM % 2 == 0, "fragment pairs");
  static_assert(STAGES >= 2, "tiles ahead of the one computing");
  constexpr bool FP8 = sizeof(C) == 1;
  constexpr int BF16_STAGES = FP8 ? 1 : STAGES;  // an FP8 cache's tiles are widened into one bf16 tile
  extern __shared__ __align__(16) unsigned char prefillShared[];
  bf16_t* sK = reinterpret_cast<bf16_t*>(prefillShared);  // [BF16_STAGES][BK][ROW]
  bf16_t* sV = sK + BF16_STAGES * BK * ROW;                // [BF16_STAGES][BK][ROW]
  bf16_t* sQ = sV + BF16_STAGES * BK * ROW;                // QS: [HP][BQ][ROW]
  unsigned char* sK8 = reinterpret_cast<unsigned char*>(sQ + (QS ? HP * BQ * ROW : 0));  // FP8: [STAGES][BK][D]
  unsigned char* sV8 = sK8 + STAGES * BK * D;                                           // FP8: [STAGES][BK][D]

  if (blockDim.x != NUM_THREADS) __trap();  // a launch of the wrong width would leave tiles half loaded
  const int tile = gridDim.x - 1 - blockIdx.x;
  const int seq = tiles[2 * tile];
  const int row0 = tiles[2 * tile + 1];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int h = blockIdx.y * HP + warp / (BQ / 16);
  const int g = lane >> 2, t = lane & 3;
  const int rowEnd = min(row0 + BQ, queryStartLoc[seq + 1]);
  const int kvh = h / (numHeads / numKvHeads);
  const int qkvStride = (numHeads + 2 * numKvHeads) * D;
  const int* table = blockTables + (long long)seq * meta[META_BLOCK_TABLE_STRIDE];
  const int kvEnd = positions[rowEnd - 1] + 1;

  // element c of key `key`'s kv head in the paged cache (0 where the key is not loaded)
  auto cacheAt = [&](int key, int c, bool valid) -> long long {
    return valid ? (((long long)table[key / blockSize] * blockSize + key % blockSize) * numKvHeads + kvh) * D + c : 0;
  };
  // keys [kt, kt + BK) into buffer `stage`; keys past kvEnd are zeros
  auto loadTile = [&](int stage, int kt) {
    if constexpr (FP8) {
      for (int i = threadIdx.x; i < BK * (D / 16); i += NUM_THREADS) {
        const int j = i / (D / 16), c = i % (D / 16) * 16;
        const bool valid = kt + j < kvEnd;
        const long long at = cacheAt(kt + j, c, valid);
        cp_async_16(sK8 + (stage * BK + j) * D + c, kCache + at, valid);
        cp_async_16(sV8 + (stage * BK + j) * D + c, vCache + at, valid);
      }
    } else {
#pragma unroll
      for (int v = 0; v < VECS_PER_THREAD; v++) {
        const int i = threadIdx.x + v * NUM_THREADS;
        const int j = i / VECS_PER_ROW, c = (i % VECS_PER_ROW) * 8;
        const bool valid = kt + j < kvEnd;
        const long long at = cacheAt(kt + j, c, valid);
        cp_async_16(sK + (stage * BK + j) * ROW + c, kCache + at, valid);
        cp_async_16(sV + (stage * BK + j) * ROW + c, vCache + at, valid);
      }
    }
    cp_async_commit();
  };
#pragma unroll
  for (int st = 0; st < STAGES - 1; st++) {
    if (st * BK < kvEnd) loadTile(st, st * BK);
    else cp_async_commit();  // empty groups keep the count of groups in flight uniform
  }

  const int warpRow0 = row0 + warp % (BQ / 16) * 16;
  const int warpFirstPos = warpRow0 < rowEnd ? positions[warpRow0] : -1;
  const int warpLastPos = warpRow0 < rowEnd ? positions[min(warpRow0 + 15, rowEnd - 1)] : -1;
  const int rowA = warpRow0 + g, rowB = rowA + 8;
  const int posA = rowA < rowEnd ? positions[rowA] : -1;
  const int posB = rowB < rowEnd ? positions[rowB] : -1;

  unsigned qa[QS ? 1 : KSTEPS][4];
  if constexpr (QS) {  // the block's rows of its HP heads, zeros past rowEnd (stored before the loop's first barrier)
    for (int i = threadIdx.x; i < HP * BQ * VECS_PER_ROW; i += NUM_THREADS) {
      const int r = i / VECS_PER_ROW % BQ, hh = i / (VECS_PER_ROW * BQ), c = i % VECS_PER_ROW * 8;
      u32x4 v = {0u, 0u, 0u, 0u};
      if (row0 + r < rowEnd)
        v = *reinterpret_cast<const u32x4*>(qkv + (long long)(row0 + r) * qkvStride + (blockIdx.y * HP + hh) * D + c);
      *reinterpret_cast<u32x4*>(sQ + (hh * BQ + r) * ROW + c) = v;
    }
  } else {
    const bf16_t* qA = qkv + (long long)rowA * qkvStride + h * D + 2 * t;
    const bf16_t* qB = qkv + (long long)rowB * qkvStride + h * D + 2 * t;
#pragma unroll
    for (int ks = 0; ks < KSTEPS; ks++) {
      qa[ks][0] = posA >= 0 ? *reinterpret_cast<const unsigned*>(qA + ks * 16) : 0u;
      qa[ks][1] = posB >= 0 ? *reinterpret_cast<const unsigned*>(qB + ks * 16) : 0u;
      qa[ks][2] = posA >= 0 ? *reinterpret_cast<const unsigned*>(qA + ks * 16 + 8) : 0u;
      qa[ks][3] = posB >= 0 ? *reinterpret_cast<const unsigned*>(qB + ks * 16 + 8) : 0u;
    }
  }
  float o[NDIM][4];
#pragma unroll
  for (int n = 0; n < NDIM; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;
  float mA = NEG_INF, mB = NEG_INF, lA = 0.f, lB = 0.f;  // l: this thread's columns only until the end
  const float scaleLog2 = scale * 1.4426950408889634f;

  for (int kt = 0, it = 0; kt < kvEnd; kt += BK, it++) {
    const int stage = it % STAGES;
    // the buffer STAGES - 1 tiles ahead was released by the last iteration's closing barrier
    if (kt + (STAGES - 1) * BK < kvEnd) loadTile((it + STAGES - 1) % STAGES, kt + (STAGES - 1) * BK);
    else cp_async_commit();
    cp_async_wait<STAGES - 1>();  // this thread's copies of tile `it` landed
    __syncthreads();              // everyone's did
    if constexpr (FP8) {  // widen the tile into the bf16 one (free: the last iteration's closing barrier)
      for (int i = threadIdx.x; i < BK * (D / 8); i += NUM_THREADS) {
        const int j = i / (D / 8), c = i % (D / 8) * 8;
        const uint2 kw = *reinterpret_cast<const uint2*>(sK8 + (stage * BK + j) * D + c);
        const uint2 vw = *reinterpret_cast<const uint2*>(sV8 + (stage * BK + j) * D + c);
        *reinterpret_cast<u32x4*>(sK + j * ROW + c) = widen_fp8x8(kw);
        *reinterpret_cast<u32x4*>(sV + j * ROW + c) = widen_fp8x8(vw);
      }
      __syncthreads();
    }
    const bf16_t* tK = sK + (FP8 ? 0 : stage) * BK * ROW;
    const bf16_t* tV = sV + (FP8 ? 0 : stage) * BK * ROW;

    if (kt <= warpLastPos) {  // warp-uniform: otherwise every key of the tile is in all its rows' future
      float s[NKEY][4];
#pragma unroll
      for (int n = 0; n < NKEY; n++) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
#pragma unroll
      for (int ks = 0; ks < KSTEPS; ks += 2) {
        unsigned q2[2][4];  // QS: k steps ks, ks + 1 (matrix i: rows 8 (i & 1) .., k 8 (i / 2) ..)
        if constexpr (QS) {
          const bf16_t* q = sQ + (warp / (BQ / 16) * BQ + warp % (BQ / 16) * 16 + (lane & 7) + (lane >> 3 & 1) * 8) * ROW +
                            ks * 16 + (lane >> 4) * 8;
          ldmatrix_x4(q2[0], q);
          ldmatrix_x4(q2[1], q + 16);
        }
#pragma unroll
        for (int n = 0; n < NKEY; n++) {
          unsigned b[4];  // matrix i: keys 8n .. 8n+7, dims 16 ks + 8i .. +7
          ldmatrix_x4(b, tK + (n * 8 + (lane & 7)) * ROW + ks * 16 + (lane >> 3) * 8);
          mma_bf16_16816(s[n], QS ? q2[0] : qa[QS ? 0 : ks], b[0], b[1]);
          mma_bf16_16816(s[n], QS ? q2[1] : qa[QS ? 0 : ks + 1], b[2], b[3]);
        }
      }

      const bool needMask = kt + BK - 1 > warpFirstPos;
      float maxA = mA, maxB = mB;
#pragma unroll
      for (int n = 0; n < NKEY; n++) {
#pragma unroll
        for (int e = 0; e < 4; e++) {
          const int key = kt + n * 8 + 2 * t + (e & 1);
          const int pos = e < 2 ? posA : posB;
          s[n][e] = needMask && key > pos ? NEG_INF : s[n][e] * scaleLog2;
        }
        maxA = fmaxf(maxA, fmaxf(s[n][0], s[n][1]));
        maxB = fmaxf(maxB, fmaxf(s[n][2], s[n][3]));
      }
      maxA = fmaxf(maxA, __shfl_xor_sync(FULL_MASK, maxA, 1));
      maxA = fmaxf(maxA, __shfl_xor_sync(FULL_MASK, maxA, 2));
      maxB = fmaxf(maxB, __shfl_xor_sync(FULL_MASK, maxB, 1));
      maxB = fmaxf(maxB, __shfl_xor_sync(FULL_MASK, maxB, 2));
      // a row that has seen no key yet (an idle row) keeps max -inf: subtract 0 instead, so exp gives 0, not NaN
      const float baseA = maxA == NEG_INF ? 0.f : maxA;
      const float baseB = maxB == NEG_INF ? 0.f : maxB;
      const float corrA = fast_exp2(mA - baseA), corrB = fast_exp2(mB - baseB);
      mA = maxA;
      mB = maxB;
      lA *= corrA;
      lB *= corrB;
#pragma unroll
      for (int n = 0; n < NDIM; n++) {
        o[n][0] *= corrA;
        o[n][1] *= corrA;
        o[n][2] *= corrB;
        o[n][3] *= corrB;
      }
#pragma unroll
      for (int n = 0; n < NKEY; n++) {
        s[n][0] = fast_exp2(s[n][0] - baseA);
        s[n][1] = fast_exp2(s[n][1] - baseA);
        s[n][2] = fast_exp2(s[n][2] - baseB);
        s[n][3] = fast_exp2(s[n][3] - baseB);
        lA += s[n][0] + s[n][1];
        lB += s[n][2] + s[n][3];
      }

#pragma unroll
      for (int kk = 0; kk < BK / 16; kk++) {
        // S's C fragments of key tiles 2kk, 2kk+1 are P's A fragment for k step kk
        const unsigned pa[4] = {pack_bf16x2(s[2 * kk][0], s[2 * kk][1]), pack_bf16x2(s[2 * kk][2], s[2 * kk][3]),
                                pack_bf16x2(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                                pack_bf16x2(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
        for (int n = 0; n < NDIM; n += 2) {
          unsigned b[4];  // matrix i (transposed): keys 16 kk + 8 (i & 1) .. +7, dims 8 (n + i / 2) .. +7
          ldmatrix_x4_trans(b, tV + (kk * 16 + ((lane >> 3) & 1) * 8 + (lane & 7)) * ROW + (n + (lane >> 4)) * 8);
          mma_bf16_16816(o[n], pa, b[0], b[1]);
          mma_bf16_16816(o[n + 1], pa, b[2], b[3]);
        }
      }
    }
    __syncthreads();  // every warp is done with this buffer before a load overwrites it
  }

  lA += __shfl_xor_sync(FULL_MASK, lA, 1);
  lA += __shfl_xor_sync(FULL_MASK, lA, 2);
  lB += __shfl_xor_sync(FULL_MASK, lB, 1);
  lB += __shfl_xor_sync(FULL_MASK, lB, 2);
  const float invA = posA >= 0 ? 1.f / lA : 0.f, invB = posB >= 0 ? 1.f / lB : 0.f;
  bf16_t* outA = out + (long long)rowA * numHeads * D + h * D + 2 * t;
  bf16_t* outB = out + (long long)rowB * numHeads * D + h * D + 2 * t;
#pragma unroll
  for (int n = 0; n < NDIM; n++) {
    if (posA >= 0) *reinterpret_cast<unsigned*>(outA + n * 8) = pack_bf16x2(o[n][0] * invA, o[n][1] * invA);
    if (posB >= 0) *reinterpret_cast<unsigned*>(outB + n * 8) = pack_bf16x2(o[n][2] * invB, o[n][3] * invB);
  }
}

#define INSTANTIATE_MMA_C(name, C, D, BQ, BK, STAGES, HP, QS, MIN_BLOCKS)                                     \
  extern "C" __global__ void __launch_bounds__(BQ * 2 * HP, MIN_BLOCKS) name(                                   \
      const bf16_t* qkv, const C* kCache, const C* vCache, bf16_t* out, const int* meta,                         \
      const int* blockTables, const int* tiles, const int* queryStartLoc, const int* positions, int numHeads,    \
      int numKvHeads, int blockSize, float scale) {                                                             \
    attention_prefill_mma<C, D, BQ, BK, STAGES, HP, QS>(qkv, kCache, vCache, out, meta, blockTables, tiles,      \
                                                          queryStartLoc, positions, numHeads, numKvHeads,       \
                                                          blockSize, scale);                                    \
  }
// each build for a bf16 cache (attention_prefill_bf16_...) and an FP8 one (attention_prefill_bf16_fp8_...)
#define INSTANTIATE_MMA(suffix, D, BQ, BK, STAGES, HP, QS, MIN_BLOCKS)                                                    \
  INSTANTIATE_MMA_C(attention_prefill_bf16_d##D##suffix, bf16_t, D, BQ, BK, STAGES, HP, QS, MIN_BLOCKS)                  \
  INSTANTIATE_MMA_C(attention_prefill_bf16_fp8_d##D##suffix, fp8_t, D, BQ, BK, STAGES, HP, QS, MIN_BLOCKS)

// The builds: PREFILL_BUILDS(X), X(suffix, D, BK, STAGES, HP, QS, MIN_BLOCKS) each, is kernel-defines.ts's
// PREFILL_BUILDS, the list attention-launch.ts picks from and sizes shared memory by. Tile and stage shapes were
// chosen by bench-prefill (src/lab; docs/perf-log.md, session 13 and "Moved from code comments"). D 128: _h1 (a head a
// block) for odd GQA groups; two heads, or four where the group allows.
#define INSTANTIATE_PREFILL(suffix, D, BK, STAGES, HP, QS, MIN_BLOCKS) \
  INSTANTIATE_MMA(suffix, D, PREFILL_TILE_ROWS, BK, STAGES, HP, QS, MIN_BLOCKS)
PREFILL_BUILDS(INSTANTIATE_PREFILL)
