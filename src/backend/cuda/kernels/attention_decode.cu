// Paged attention, one query token per row (decode), the kv range split across
// thread blocks (flash-decoding); a row's splits are folded in split order (fold_split).
//
//   query token t of sequence s = tokenToSeq[t] attends to kv positions [0, kvLen), kvLen = positions[t] + 1
//   (causal), read through blockTables[s * stride + (j >> blockShift)] (stride in the metadata header).
//   q head h reads kv head h / (numHeads / numKvHeads) (GQA).
//
// Batch invariance: a row's splits are a pure function of its own kvLen (split_plan), never of the
// batch, the grid or eager vs graph:
//   target = kvLen > 2 splitTokens ? longSplitTokens : kvLen <= DECODE_SHORT_ROW_KV ? shortSplitTokens : splitTokens
//   (few splits for rows of W1-like lengths, where large batches make each split cost; many for long rows, and
//   several for short ones, where a single stream needs the blocks; shortSplitTokens 0: none);
//   wanted = min(maxSplits, ceil(kvLen / target)); chunk = ceil(kvLen / wanted) rounded up to 16;
//   numSplits = ceil(kvLen / chunk) (<= wanted, none empty); split z covers [z chunk, min((z+1) chunk, kvLen)).
// GQA: block (x, t, z) serves the G query heads h0 = x G .. h0 + G - 1, which share kv head h0 / qHeadsPerKv
// (G, a template argument, is the largest built one (8, 4, 2, 1; 5-7 for odd groups) dividing qHeadsPerKv, or 1
// when the rows are too few to fill the GPU: decodeGroup in decode-splits.ts), reading each K and V once for all of
// them; per head the arithmetic is that of G = 1, so the choice of G changes no bit.
// Block (x, t, z) computes splits z, z + gridDim.z, ... of its rows, so the grid's z extent only decides
// how many blocks share the work: blocks with z >= numSplits exit at once. Each split ends as a state
// (max, sum of exp, unnormalized output), and a row's states are folded in split order by fold_split,
// one way or the other: a block that walks every split of its row (gridDim.z == 1, a row of one split, or a
// short row of more splits than gridDim.z) folds them as it goes, with no global traffic; otherwise every
// split publishes its state in partialOut/partialMl, counts itself in rowCounters[t, x], and the block that
// completes the count folds them all (and puts the counter back to 0 for the next launch); or, in a _pre build
// launched in clusters of the grid's z (one split a block), block 0 folds them from the cluster's shared memory. The
// same fold of the same states in the same order: which way, and which block, changes no bit, so splits can be
// small (parallel single streams) at a small cost per split at large batches.
//
// Every rounding is spelled out (__fmaf_rn, __fmul_rn, __fadd_rn), so no caller's inlining context can contract
// the arithmetic differently: the fused prologue and every build of this function get the same bits.
//
// Lanes: a kv position is read by LPP lanes, each holding EPL consecutive dims (16-byte loads; bf16 D 128:
// 16 lanes x 8 dims, so a warp reads PPW = 2 positions per load); per round warp w, slot u, lane group p
// takes position j0 + (u * WARPS + w) * PPW + p, SLOTS slots in flight per warp. Each lane group keeps its
// own running max / sum / output; groups combine within the warp, then warps in shared memory.
//
// Rope fused (ropeTable non-null; a decode-only step, whose rope.cu kernel the backend then skips): qkv holds the
// raw q, k, v; each block ropes (and norms, with qNorm / kNorm) its G q heads with rope.cuh's rope_head, the
// arithmetic of qk_norm_rope, and the blocks of a row's last split write the new token's roped k and its v to the
// cache at slotMapping[t] before they read it. One node less per layer, the same bits.
//
// A dependent launch (PDL): the step's metadata is read before waiting for the kernel before (it was copied before the
// step's first kernel), and in the EARLY builds (EARLY_BUILD) the block's first round of K and V, where it holds no
// position the kernels before or this one write (a row's new token is its last), and its warp's first rope item's
// norm weights and angles (rope.cuh's rope_consts): their latency hides under the kernel before's end.
//
// Shapes: qkv [numTokens, (numHeads + 2 numKvHeads) D]; caches [numBlocks, blockSize, numKvHeads, D];
//   ropeTable [numTokens, 2, D/2] f32 (rope.cu's rope_table) or null; qNorm, kNorm [D] or null; ropePairs, the
//   rotated pairs of a head (D/2, or fewer: partial rotary, rope.cuh);
//   out [numTokens, numHeads D]; partialOut [numRows, numHeads, maxSplits, D] f32 (unnormalized);
//   partialMl [numRows, numHeads, maxSplits, 2] f32 (max, sum of exp); rowCounters [numRows, numHeads / G]: indexed
//   by the grid row (slot), not the token, so a mixed step's few decode rows need partials for them alone.
// Launch: attention_decode_<dtype>_d<D>_g<G> grid (numHeads / G, numTokens, Z), block 128 (4 warps): the kv heads
// of one token are neighbours in launch order, so blocks running together read neighbouring bytes of its pages.
// Grid row y serves token rowOrder[y] (step-meta.ts: a decode step's rows longest first, so the long rows do not
// run alone at the grid's end); the order decides only which block computes a row, never its bits.
#include "common.cuh"
#include "mma.cuh"
#include "rope.cuh"

// From TypeScript (kernel-defines.ts): DECODE_WARPS, warps a block; DECODE_CHUNK_ROUND, the kv positions a split's
// chunk is a multiple of; DECODE_SHORT_ROW_KV, the longest row that splits every shortSplitTokens; DECODE_MAX_CLUSTER,
// the most blocks of a cluster (its z; decodeCluster in decode-splits.ts); DECODE_FOLD_BATCH, the published split
// states a fold reads at once (decode-splits.ts FOLD_BATCH).
#define DECODE_SLOTS 4
#define DECODE_THREADS (DECODE_WARPS * 32)

#include "attention_decode.cuh"

// The _pre builds' rounds pipelined (PIPE: each round's K and V asked for before the round before is summed, from a
// second set of registers) at 3 blocks a SM (163 registers; they take grids of at most 2 a SM), so a round's loads
// overlap the last one's sums (docs/perf-log.md, session 25). The same sums in the same order.
// QUIRE_KERNEL_DEFINES=DECODE_PIPE=0,DECODE_PRE_MINB=4 gives the build without it.
#ifndef DECODE_PIPE
#define DECODE_PIPE 1
#endif
#ifndef DECODE_PRE_MINB
#define DECODE_PRE_MINB 3
#endif
// MINB: the blocks per SM the registers must allow (launch bounds). _w ("wide") kernels: 6 for G <= 2 (80 registers
// instead of 108, no spills), the same code and bits; decodeWide in decode-splits.ts picks them (grids of more than
// 8 blocks per SM).
// suffix: the compute type, then _fp8 where the cache is FP8 (C)
// EARLY (K and V of the first round and the rope's constants read before the wait): the _pre builds, and bf16 caches
// of G <= 2 and 4 blocks a SM, whose registers hold them without spilling (128); the others' would spill
#define EARLY_BUILD(T, C, G, MINB, PRE) ((PRE) || ((MINB) == 4 && (G) <= 2 && sizeof(T) == 2 && sizeof(C) == 2))
#define INSTANTIATE_DGM(suffix, T, C, D, G, MINB, tail) INSTANTIATE_DGMV(suffix, T, C, 16 / (int)sizeof(T), D, G, MINB, tail)
// V: elements a lane loads at once (16 bytes of the compute type; an FP8 cache 8 or 16)
#define INSTANTIATE_DGMV(suffix, T, C, V, D, G, MINB, tail) INSTANTIATE_DGMVP(suffix, T, C, V, D, G, MINB, tail, false)
// PRE: the split's K and V asked of L2 before the wait (the _pre builds)
#define INSTANTIATE_DGMVP(suffix, T, C, V, D, G, MINB, tail, PRE) INSTANTIATE_DGMVPH(suffix, T, C, V, D, G, MINB, tail, PRE, 1)
// HG: head groups, G 1 blocks of DECODE_THREADS side by side in one (the _hg builds)
#define INSTANTIATE_DGMVPH(suffix, T, C, V, D, G, MINB, tail, PRE, HG) \
  INSTANTIATE_DGMVPHM(suffix, T, C, V, D, G, MINB, tail, PRE, HG, false)
// MMA: the rounds on tensor cores (the _mma builds, attention_decode_mma.cuh)
#define INSTANTIATE_DGMVPHM(suffix, T, C, V, D, G, MINB, tail, PRE, HG, MMA)                                      \
  extern "C" __global__ void __launch_bounds__(DECODE_THREADS * HG, MINB) attention_decode_##suffix##_d##D##_g##G##tail( \
      const T* qkv, const C* kCache, const C* vCache, T* out, float* partialOut, float* partialMl,                \
      int* rowCounters, const int* meta, const int* blockTables, const int* tokenToSeq, const int* positions,     \
      int numHeads, int numKvHeads, int blockShift, float scale, int splitTokens, int longSplitTokens,            \
      int shortSplitTokens, int maxSplits, int qHeadsPerKv, const int* rowOrder, const float* ropeTable,           \
      const T* qNorm, const T* kNorm, const int* slotMapping, float eps, int ropePairs) {                         \
    attention_decode<T, C, D, G, V, true, EARLY_BUILD(T, C, G, (MINB) * (HG), PRE) && !(MMA), PRE, PRE && DECODE_PIPE, \
                     HG, MMA>(                                                                                         \
        qkv, kCache, vCache, out, partialOut, partialMl, rowCounters, meta, blockTables, tokenToSeq, positions,      \
        numHeads, numKvHeads, blockShift, scale, splitTokens, longSplitTokens, shortSplitTokens, maxSplits,          \
        qHeadsPerKv, blockIdx.x, rowOrder[blockIdx.y], blockIdx.y, blockIdx.z, gridDim.x, gridDim.z, ropeTable,      \
        qNorm, kNorm, slotMapping, eps, ropePairs);                                                                  \
  }
#define INSTANTIATE_DG(suffix, T, C, V, D, G) INSTANTIATE_DGMV(suffix, T, C, V, D, G, G <= 4 ? 4 : 2, )

#define INSTANTIATE_D(suffix, T, C, V, D) \
  INSTANTIATE_DG(suffix, T, C, V, D, 1)   \
  INSTANTIATE_DG(suffix, T, C, V, D, 2)   \
  INSTANTIATE_DG(suffix, T, C, V, D, 4)   \
  INSTANTIATE_DG(suffix, T, C, V, D, 8)

#define INSTANTIATE(suffix, T, C, V)  \
  INSTANTIATE_D(suffix, T, C, V, 64)  \
  INSTANTIATE_D(suffix, T, C, V, 128) \
  INSTANTIATE_D(suffix, T, C, V, 256)

// the bf16 builds (the whole group of Qwen2.5's odd GQA groups among them: decode-splits.ts, decodeGroupsBuilt)
#define INSTANTIATE_BF16(suffix, C, V)                    \
  INSTANTIATE(suffix, bf16_t, C, V)                       \
  INSTANTIATE_DG(suffix, bf16_t, C, V, 64, 7)             \
  INSTANTIATE_DG(suffix, bf16_t, C, V, 128, 5)            \
  INSTANTIATE_DG(suffix, bf16_t, C, V, 128, 6)            \
  INSTANTIATE_DG(suffix, bf16_t, C, V, 128, 7)            \
  INSTANTIATE_DGMV(suffix, bf16_t, C, V, 64, 1, 6, _w)    \
  INSTANTIATE_DGMV(suffix, bf16_t, C, V, 64, 2, 6, _w)    \
  INSTANTIATE_DGMV(suffix, bf16_t, C, V, 128, 1, 6, _w)   \
  INSTANTIATE_DGMV(suffix, bf16_t, C, V, 128, 2, 6, _w)   \
  INSTANTIATE_DGMV(suffix, bf16_t, C, V, 256, 1, 6, _w)   \
  INSTANTIATE_DGMV(suffix, bf16_t, C, V, 256, 2, 6, _w)

INSTANTIATE_BF16(bf16, bf16_t, 8)
// Few rows, one query head a block, a bf16 cache (attention-launch.ts decodePrefetch): the split's K and V asked of
// L2 before the wait, the rounds pipelined (DECODE_PIPE)
INSTANTIATE_DGMVP(bf16, bf16_t, bf16_t, 8, 64, 1, DECODE_PRE_MINB, _pre, true)
INSTANTIATE_DGMVP(bf16, bf16_t, bf16_t, 8, 128, 1, DECODE_PRE_MINB, _pre, true)
// Few rows of long contexts, GQA groups of 4 or more, a bf16 cache (attention-launch.ts, QUIRE_DECODE_HEAD_GROUPS): four
// G 1 blocks in one, so that a kv head's four query heads read its K and V once from L2 (their loads meet in L1); the
// same code and bits as G 1's, at the registers of 4 blocks a SM
INSTANTIATE_DGMVPH(bf16, bf16_t, bf16_t, 8, 64, 1, 1, _hg4, false, 4)
INSTANTIATE_DGMVPH(bf16, bf16_t, bf16_t, 8, 128, 1, 1, _hg4, false, 4)
// The rounds on tensor cores (QUIRE_DECODE_MMA: attention-launch.ts), a bf16 cache of D 64 or 128, at every G the
// backend may pick there (decode-splits.ts decodeGroupsBuilt); 3 blocks a SM by registers (DECODE_MMA_MINB: 168 at
// D 128 G 8 with no spill, 192 at 2)
#ifndef DECODE_MMA_MINB
#define DECODE_MMA_MINB 3
#endif
#define INSTANTIATE_MMA(D, G) INSTANTIATE_DGMVPHM(bf16, bf16_t, bf16_t, 8, D, G, DECODE_MMA_MINB, _mma, false, 1, true)
INSTANTIATE_MMA(64, 1)
INSTANTIATE_MMA(64, 2)
INSTANTIATE_MMA(64, 4)
INSTANTIATE_MMA(64, 7)
INSTANTIATE_MMA(64, 8)
INSTANTIATE_MMA(128, 1)
INSTANTIATE_MMA(128, 2)
INSTANTIATE_MMA(128, 4)
INSTANTIATE_MMA(128, 5)
INSTANTIATE_MMA(128, 6)
INSTANTIATE_MMA(128, 7)
INSTANTIATE_MMA(128, 8)
#undef INSTANTIATE_MMA
// An FP8 cache (attention-launch.ts; the backend then picks G 1 or 2 whatever the GQA group): 16-byte loads of 16 e4m3,
// which keep the loads in flight the bandwidth needs; G 4 would spill (docs/perf-log.md, session 18)
#define INSTANTIATE_FP8X16(D)                        \
  INSTANTIATE_DG(bf16_fp8x16, bf16_t, fp8_t, 16, D, 1) \
  INSTANTIATE_DG(bf16_fp8x16, bf16_t, fp8_t, 16, D, 2)
INSTANTIATE_FP8X16(64)
INSTANTIATE_FP8X16(128)
INSTANTIATE_FP8X16(256)
#undef INSTANTIATE_FP8X16
#undef INSTANTIATE_BF16
#undef INSTANTIATE
#undef INSTANTIATE_D
#undef INSTANTIATE_DG
#undef INSTANTIATE_DGM
#undef INSTANTIATE_DGMV
#undef INSTANTIATE_DGMVP
#undef INSTANTIATE_DGMVPH
#undef INSTANTIATE_DGMVPHM
#undef EARLY_BUILD
