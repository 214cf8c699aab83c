import { readKnob } from '../../knobs/knobs.js';
// How the decode attention kernel (kernels/attention_decode.cu) splits one
// row's kv range. The split plan is a pure function of the row's kv length, so
// a row's output bits do not depend on the batch it runs in, on the grid, or on
// eager vs graph; the grid's z extent (decodeGridZ) only decides how many
// blocks share a row's splits. split_plan in the kernel mirrors splitPlan here.

/**
 * Target kv positions per split (QUIRE_DECODE_SPLIT_TOKENS overrides it, for A/B runs): large, because at
 * large batches, where every block walks its whole row, each split costs the block a barrier and a merge.
 */
export const SPLIT_TOKENS = readKnob('QUIRE_DECODE_SPLIT_TOKENS');
/**
 * Target kv positions per split of rows longer than 2 * SPLIT_TOKENS (QUIRE_DECODE_LONG_SPLIT_TOKENS
 * overrides it): small, so that a single long stream spreads over many blocks.
 */
export const LONG_SPLIT_TOKENS = readKnob('QUIRE_DECODE_LONG_SPLIT_TOKENS');
/** Rows of at most this many positions are short (the kernel's DECODE_SHORT_ROW_KV): split every SHORT_SPLIT_TOKENS. */
export const SHORT_ROW_KV = 512;
/**
 * Target kv positions per split of rows of at most SHORT_ROW_KV (QUIRE_DECODE_SHORT_SPLIT_TOKENS overrides it, 0
 * none): a short row's one large split is a long walk for its block when the rows are few (rows up to 512 in up
 * to 4 splits of 128; it costs a little where short rows are many: docs/perf-log.md, session 11).
 */
export const SHORT_SPLIT_TOKENS = readKnob('QUIRE_DECODE_SHORT_SPLIT_TOKENS');
/**
 * Most splits of one row (QUIRE_DECODE_MAX_SPLITS); also the split stride of the partial buffers, whose bytes grow
 * with it ([capSeqs, numHeads, MAX_SPLITS, D + 2] f32). A row longer than MAX_SPLITS * LONG_SPLIT_TOKENS takes longer
 * splits, so this bounds how many blocks a single long stream can spread over.
 */
export const MAX_SPLITS = readKnob('QUIRE_DECODE_MAX_SPLITS');
/**
 * Most splits of one row on the _mma builds (QUIRE_DECODE_MMA_MAX_SPLITS; the kernel takes a launch's cap as an
 * argument, which is also the stride of its split states), in grids that MAX_SPLITS would leave under one block a SM
 * (mmaSplitCap). Their bits are their own, so their rows may split more: a single long stream on whole groups is
 * 8 kv heads x 16 splits = 128 blocks on qwen3-8b, under one a SM; 32 splits gave it +4% at 16k and +8% at 32k, and
 * lost 5% with 8 rows at 16k (already 1,024 blocks at 16: session 44).
 */
export const MMA_MAX_SPLITS = readKnob('QUIRE_DECODE_MMA_MAX_SPLITS');

/**
 * The _mma builds' split cap for a grid of `numRows` (token, head-group) rows: `mmaMaxSplits` where MAX_SPLITS splits
 * a row would give fewer blocks than SMs, else no more than MAX_SPLITS. A function of the row count alone, so eager
 * and captured steps of one size split alike.
 */
export function mmaSplitCap(numRows: number, numSMs: number, mmaMaxSplits = MMA_MAX_SPLITS): number {
  return numRows * MAX_SPLITS < numSMs ? mmaMaxSplits : Math.min(mmaMaxSplits, MAX_SPLITS);
}
/**
 * Row-splits (decode rows x their launch's cap) the split-state buffers hold for up to `capRows` decode rows:
 * MAX_SPLITS a row (any grid's cap past mmaSplitCap's few rows), or `mmaMaxSplits` (null: the _mma builds off) for
 * the fewer than numSMs / MAX_SPLITS rows whose grids mmaSplitCap lets split more. A flat capRows x 32 would double
 * the buffers for a cap only lone rows take.
 */
export function splitStateRows(capRows: number, numSMs: number, mmaMaxSplits: number | null): number {
  const few = mmaMaxSplits === null ? 0 : Math.min(capRows, Math.ceil(numSMs / MAX_SPLITS)) * mmaMaxSplits;
  return Math.max(capRows * MAX_SPLITS, few);
}

/** Split chunks are whole multiples of this many kv positions (the kernel's DECODE_CHUNK_ROUND: kernel-defines.ts). */
export const DECODE_CHUNK_ROUND = 16;
/**
 * Blocks per SM the grid aims for when rows alone do not fill the GPU, with rows taken longest first (step-meta.ts
 * rowOrder): the better of z 1 and 2 at 512 and 1,024 blocks (docs/perf-log.md, "Moved from code comments"). (A short
 * row of more splits than z is walked by one block: kernels/attention_decode.cu.)
 */
const TARGET_BLOCKS_PER_SM = 8;

export interface SplitPlan {
  numSplits: number;
  /** kv positions per split (a multiple of DECODE_CHUNK_ROUND); split z covers [z chunk, min((z + 1) chunk, kvLen)). */
  chunk: number;
}

/** The splits of a row of kvLen positions, at most maxSplits (the launch's cap: MAX_SPLITS or MMA_MAX_SPLITS). */
export function splitPlan(kvLen: number, maxSplits = MAX_SPLITS): SplitPlan {
  if (kvLen <= 0) return { numSplits: 1, chunk: DECODE_CHUNK_ROUND };
  const target = kvLen > 2 * SPLIT_TOKENS ? LONG_SPLIT_TOKENS
    : SHORT_SPLIT_TOKENS > 0 && kvLen <= SHORT_ROW_KV ? SHORT_SPLIT_TOKENS : SPLIT_TOKENS;
  const wanted = Math.max(1, Math.min(maxSplits, Math.ceil(kvLen / target)));
  const chunk = Math.ceil(Math.ceil(kvLen / wanted) / DECODE_CHUNK_ROUND) * DECODE_CHUNK_ROUND;
  return { numSplits: Math.ceil(kvLen / chunk), chunk };
}

/**
 * Decode graphs are captured per class of kv length (cuda-backend.ts graph()): a graph replays with longer rows than
 * it was captured with, so its grid z must cover the most splits any row of its class can take. Rows of at most
 * SHORT_GRAPH_KV positions (2 SPLIT_TOKENS) take at most SHORT_GRAPH_SPLITS (4: short rows' 128-position splits);
 * longer ones up to MAX_SPLITS, so a short row's graph launches no idle z blocks (docs/perf-log.md, session 22).
 * QUIRE_GRAPH_KV_CLASSES=0: one class.
 */
export const SHORT_GRAPH_KV = 2 * SPLIT_TOKENS;
export const SHORT_GRAPH_SPLITS = (() => {
  let most = 1;
  for (let kv = 1; kv <= SHORT_GRAPH_KV; kv++) most = Math.max(most, splitPlan(kv).numSplits);
  return most;
})();
export const GRAPH_KV_CLASSES = readKnob('QUIRE_GRAPH_KV_CLASSES');

/** Whether a decode step's rows (kv length = position + 1) are all of the short graph class. */
export function shortGraphRows(positions: Int32Array, classes = GRAPH_KV_CLASSES): boolean {
  if (!classes) return false;
  for (const p of positions) if (p + 1 > SHORT_GRAPH_KV) return false;
  return true;
}

/**
 * The graph cache's key for the caller's (a bucket, signed by what the step returns) and the step's kv-length class
 * (shortGraphRows): each class has its own graph, whose decode grid covers its rows' splits.
 */
export function graphKey(key: number, short: boolean): number {
  return 2 * key + (short ? 1 : 0);
}

/**
 * Grid z of the decode kernel: as many blocks per row as fit the target number
 * of resident blocks, rounded down (a row walked by one block folds its splits
 * as it goes, cheaper than publishing them), never more than the most splits
 * any row needs (`maxRowSplits`: the launch's cap `maxSplits` in a graph, whose kv lengths grow
 * between replays).
 */
export function decodeGridZ(numRows: number, numSMs: number, maxRowSplits: number, maxSplits = MAX_SPLITS): number {
  const fill = Math.floor((TARGET_BLOCKS_PER_SM * numSMs) / Math.max(1, numRows));
  return Math.max(1, Math.min(maxSplits, maxRowSplits, fill));
}

/**
 * Query heads per block of the decode kernel (its G): all of a kv head's group (or its largest built divisor,
 * decodeGroupsBuilt), read K and V once for them, unless the step's rows give fewer blocks than SMs and their splits
 * (rowSplits: the most of any row) do not make the whole-group grid `fill` blocks a SM; then one query head a block,
 * more blocks on the same pages, so every SM has work. At fill 4 a single stream keeps G 1 at every length and 8 rows
 * at 4k of context take their whole groups (+8.1% on qwen3-8b, docs/perf-log.md session 37). A whole group of at
 * least `mmaFrom` heads runs on the tensor cores (the _mma builds) and keeps from `mmaFill` (MMA_GROUP_FILL). Per head
 * the kernel's arithmetic is that of G = 1 (on CUDA cores, and on tensor cores at 'all'): no bit changes there.
 */
export function decodeGroup(numRows: number, numHeads: number, numKvHeads: number, numSMs: number, headDim = 128,
  maxG = 8, rowSplits = 1, fill = GROUP_FILL, mmaFrom = Infinity, mmaFill = MMA_GROUP_FILL,
  mmaMaxSplits = MMA_MAX_SPLITS): number {
  const even = evenGroup(numHeads, numKvHeads, maxG);
  const built = decodeGroupsBuilt(headDim).find((g) => g <= maxG && (numHeads / numKvHeads) % g === 0)!;
  const full = built !== even && numRows < ODD_GROUP_MIN_ROWS ? even : built;
  const blocks = numRows * (numHeads / full);
  if (blocks >= numSMs) return full;
  // Long rows: their splits may give whole groups' blocks enough to fill the GPU on their own, each K and V then read
  // once for the group, not once a query head (at 32k of context, G = 1 reads 4x the cache's bytes through L2)
  const mma = full >= mmaFrom;
  const f = mma ? mmaFill : fill;
  const cap = mma ? mmaSplitCap(blocks, numSMs, mmaMaxSplits) : MAX_SPLITS;
  return f > 0 && blocks * Math.min(rowSplits, cap) >= f * numSMs ? full : 1;
}

/**
 * Blocks per SM (rows x whole-group blocks x the rows' splits) from which a step of few rows keeps whole GQA groups
 * on the CUDA-core kernel (QUIRE_DECODE_GROUP_FILL; 0: rows alone decide, splits not counted).
 */
export const GROUP_FILL = readKnob('QUIRE_DECODE_GROUP_FILL');
/**
 * The same for a whole group the _mma builds would serve (decodeGroup's `mmaFrom`: the least G the tensor cores take,
 * attention-launch.ts mmaFromGroup), QUIRE_DECODE_MMA_GROUP_FILL: 0.9, so qwen3-8b alone at 16k of context (8 kv
 * heads x 16 splits, 128 blocks on 132 SMs) keeps its groups. Against G 1 on CUDA cores (H200, session 43): qwen3-8b
 * alone at 16k and 32k 169.0 -> 181.2 and 136.2 -> 155.7 tok/s (4k: 209.4 -> 210.5), qwen3-30b-a3b at batch 8 and 2k
 * 767.0 -> 886.4.
 */
export const MMA_GROUP_FILL = readKnob('QUIRE_DECODE_MMA_GROUP_FILL');

/** The largest of 8, 4, 2, 1 (up to maxG) dividing the GQA group (every kernel has those builds). */
export function evenGroup(numHeads: number, numKvHeads: number, maxG = 8): number {
  return [8, 4, 2, 1].find((g) => g <= maxG && (numHeads / numKvHeads) % g === 0)!;
}

/**
 * Rows from which an odd group's own build (5-7 query heads a block, 214-255 registers: 2 blocks a SM) beats the
 * even one's (1 or 2 a block, 4 a SM, the group's other heads reading the same pages from L2): the crossing was
 * measured on qwen2.5-7b (docs/perf-log.md, session 17). QUIRE_DECODE_ODD_ROWS moves it.
 */
export const ODD_GROUP_MIN_ROWS = readKnob('QUIRE_DECODE_ODD_ROWS');

const GROUPS_BUILT: Record<number, readonly number[]> = { 128: [8, 7, 6, 5, 4, 2, 1], 64: [8, 7, 4, 2, 1], 0: [8, 4, 2, 1] };
/** Read once: the decode path asks per layer, and an environment read is not free. */
const GROUPS_ENV = readKnob('QUIRE_DECODE_GROUPS');

/**
 * The G the decode kernel is built for at a head dim, largest first (attention_decode.cu's bf16 instantiations):
 * 8, 4, 2, 1 everywhere, and the whole group of Qwen2.5's odd ones (7: 0.5B at D 64, 7B at 128; 6: 1.5B; 5: 14B,
 * 32B), whose blocks otherwise read each K/V page 5-7 times a step (from ODD_GROUP_MIN_ROWS rows).
 * QUIRE_DECODE_GROUPS limits the list (A/B runs).
 */
export function decodeGroupsBuilt(headDim: number, env: string | undefined = GROUPS_ENV): readonly number[] {
  const built = GROUPS_BUILT[headDim] ?? GROUPS_BUILT[0]!;
  if (!env) return built;
  const allowed = new Set(env.split(',').map(Number));
  return built.filter((g) => g === 1 || allowed.has(g));
}

/**
 * Grid blocks per SM (token rows x query-head blocks, at grid z 1) beyond which steps of G <= 2 take the kernel's _w
 * build (QUIRE_DECODE_WIDE_BLOCKS overrides it; 0 always, a large number never): the same code and bits compiled for
 * 6 blocks per SM (80 registers) instead of 4 (108). Up to 8 blocks per SM, 4 at a time run the grid in two full
 * waves, where 6 at a time leave a thin second one; beyond it 6 at a time win (docs/perf-log.md, session 12).
 */
export const WIDE_BLOCKS_PER_SM = readKnob('QUIRE_DECODE_WIDE_BLOCKS');

/** Whether a decode grid of `numRows` (token, G-head block) rows at group G takes the _w kernels. */
export function decodeWide(numRows: number, G: number, numSMs: number): boolean {
  return G <= 2 && numRows > WIDE_BLOCKS_PER_SM * numSMs;
}

/**
 * The _pre builds (one query head a block, a bf16 cache, D 64 or 128) ask L2 for the K and V of the block's split
 * before the wait, so that its rounds after it do not each wait on DRAM, and fold a row's splits through a cluster
 * (decodeCluster). Taken where the grid is at most PRE_BLOCKS_PER_SM blocks a SM (QUIRE_DECODE_PREFETCH=0 never):
 * at 4 blocks a SM the _pre builds lost (docs/perf-log.md, session 22).
 */
export const PRE_BLOCKS_PER_SM = 2;
const prefetchOn = readKnob('QUIRE_DECODE_PREFETCH');

/** Whether a decode grid of `blocks` blocks (rows x head blocks x z) at group G takes a _pre build. */
export function decodePrefetch(blocks: number, G: number, D: number, kvKernels: string, numSMs: number,
  on = prefetchOn): boolean {
  return on && G === 1 && (D === 64 || D === 128) && kvKernels === 'bf16' && blocks <= PRE_BLOCKS_PER_SM * numSMs;
}

/**
 * Grid z of the clusters a _pre launch takes (1: none): its z blocks of a row one cluster, so that a row of several
 * splits folds them from the blocks' shared memory rather than through global memory and a counter
 * (QUIRE_DECODE_CLUSTER=0 never). Clusters of up to 8 blocks are portable; `pre` is false before sm_90 (none there).
 */
const clusterOn = readKnob('QUIRE_DECODE_CLUSTER');
/** Most blocks of a cluster (the kernel's DECODE_MAX_CLUSTER: block 0's room for their states). */
export const MAX_CLUSTER = 8;
export function decodeCluster(pre: boolean, gridZ: number, on = clusterOn): number {
  return on && pre && gridZ > 1 && gridZ <= MAX_CLUSTER ? gridZ : 1;
}

/**
 * Published split states the block that completes a row's count reads at once before folding them in split order
 * (QUIRE_DECODE_FOLD_BATCH; the kernel's DECODE_FOLD_BATCH, capped at 4 for groups of 4 or more and 2 for G 8 at D 256,
 * whose registers would spill): each batch costs one L2 round trip, where 1 costs one a split; above 1, a block of
 * several query heads also folds them a warp a head, side by side. The same folds in the same order at any value: no
 * bit changes. 8, the default: a single stream at 4k-32k of context decodes 2-5% faster on qwen3-0.6b, 1-2% on
 * qwen3-8b (H200, session 38, docs/perf-log.md).
 */
export const FOLD_BATCH = readKnob('QUIRE_DECODE_FOLD_BATCH');

/**
 * Query heads a decode block serves as side-by-side G 1 blocks (the kernel's _hg4 builds; QUIRE_DECODE_HEAD_GROUPS, 1
 * the default: none; 4 decoded qwen3-8b's single stream 1-5% slower at 4k-32k, H200, session 38): 4 where a launch
 * takes one query head a block and neither the _pre nor the _w build, with a bf16 cache at D 64 or 128 and 4 query
 * heads to a kv head (or a multiple), so that the four heads' K and V loads meet in one SM's L1 rather than each
 * reading L2. The same code per head: no bit changes.
 */
export const HEAD_GROUPS = Number(readKnob('QUIRE_DECODE_HEAD_GROUPS'));
export function decodeHeadGroups(G: number, D: number, kvKernels: string, numHeads: number, numKvHeads: number,
  pre: boolean, wide: boolean, want = HEAD_GROUPS): number {
  const hg = 4;
  return want === hg && G === 1 && !pre && !wide && kvKernels === 'bf16' && (D === 64 || D === 128)
    && (numHeads / numKvHeads) % hg === 0 ? hg : 1;
}

/**
 * The most splits any of a decode batch's rows (the tokens `rows` names) needs (kv length = position + 1) at a cap
 * of maxSplits.
 */
export function maxSplitsOf(positions: Int32Array, rows: Int32Array, maxSplits = MAX_SPLITS): number {
  let most = 1;
  for (const t of rows) most = Math.max(most, splitPlan(positions[t]! + 1, maxSplits).numSplits);
  return most;
}
