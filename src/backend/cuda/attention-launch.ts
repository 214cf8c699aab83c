// Launches of the two paged attention kernels over a packed step (step-meta.ts): their
// argument lists in one place; which rows go to which kernel, and the grids, are the
// backend's choice (cuda-backend.ts attention()).

import type { ForwardBatch } from '../batch.js';
import { decodeCluster, decodeHeadGroups, decodePrefetch, decodeWide, LONG_SPLIT_TOKENS, MAX_SPLITS, MMA_MAX_SPLITS,
  mmaSplitCap, SHORT_SPLIT_TOKENS, SPLIT_TOKENS } from './decode-splits.js';
import { f32, i32, ptr, type Device, type KernelArg } from './device.js';
import { DECODE_WARPS, PREFILL_BUILDS } from './kernel-defines.js';
import { PREFILL_TILE_ROWS, type MetaLayout } from './step-meta.js';

export interface AttentionLaunch {
  /** [numTokens, (numHeads + 2 numKvHeads) headDim] bf16; the step's k and v already in the cache (but see DecodeRope). */
  qkv: bigint;
  k: bigint;
  v: bigint;
  /** [numTokens, numHeads headDim] bf16. */
  out: bigint;
  /** Device address of the packed step (word 0) and its layout. */
  meta: bigint;
  layout: MetaLayout;
  numHeads: number;
  numKvHeads: number;
  headDim: number;
  blockSize: number;
  scale: number;
  /** The kernels' dtype suffix: 'bf16', or 'bf16_fp8' for an FP8 cache (default 'bf16'). */
  kvKernels?: string;
  /** An FP8 cache's decode kernel loads 16 e4m3 a lane (the _fp8x16 builds, G 1 and 2 only, no _w). */
  decodeX16?: boolean;
  /**
   * The decode kernel's rounds on tensor cores (the _mma builds, QUIRE_DECODE_MMA; a bf16 cache, head dim 64 or 128):
   * their own bits, at every G alike. 'all': every grid, so a row's bits still follow its kv length alone; 'groups':
   * grids of G >= DECODE_MMA_MIN_GROUP query heads a block, so a row's bits also follow whether its step took such a
   * G (the batch-invariant mode takes 'off'); 'off' (where unset): never. The backend's default: QUIRE_DECODE_MMA.
   */
  decodeMma?: DecodeMma;
}

export type DecodeMma = 'off' | 'all' | 'groups';

/**
 * The least G at which 'groups' takes the _mma builds. Below it most of the MMA's 16 rows are zeros: at G 2
 * (qwen3-0.6b) batches of 64 and 256 decoded 13% and 7% slower, and a single 32k stream of qwen3-8b at G 1 12%
 * slower; at G 4 (qwen3-8b) batch 64 gained 2%, at G 8 (qwen3-30b-a3b) batch 64 13% and batch 256 34% (H200,
 * session 42, docs/perf-log.md).
 */
export const DECODE_MMA_MIN_GROUP = 4;

/** The least G whose grids take the _mma builds under `mma` (Infinity: none). */
export function mmaFromGroup(mma: DecodeMma): number {
  return mma === 'all' ? 1 : mma === 'groups' ? DECODE_MMA_MIN_GROUP : Infinity;
}

/**
 * Most splits of a row in a grid of `numRows` (token, head-group) rows of G query heads a block under `mma`: the _mma
 * builds' cap (mmaSplitCap), or the kernel's.
 */
export function decodeSplitCap(G: number, mma: DecodeMma, numRows: number, numSMs: number,
  mmaMaxSplits = MMA_MAX_SPLITS): number {
  return G >= mmaFromGroup(mma) ? mmaSplitCap(numRows, numSMs, mmaMaxSplits) : MAX_SPLITS;
}

const word = (a: AttentionLaunch, offset: number): KernelArg => ptr(a.meta + BigInt(offset * 4));

/** Head dims the decode kernel's _mma builds take (kernels/attention_decode_mma.cuh: D a multiple of 32, <= 128). */
export const DECODE_MMA_HEAD_DIMS: readonly number[] = [64, 128];

export interface PrefillKernelShape {
  name: string;
  threads: number;
  /** Query heads a block serves (grid y = numHeads / headsPerBlock). */
  headsPerBlock: number;
  sharedBytes: number;
}

/**
 * The prefill kernel for a head dim and GQA group: at D 128, four heads of one kv head a block (they share
 * its K/V tiles) where the group is a multiple of 4, two where it is even, one otherwise; `suffix` names
 * another instantiation (src/lab/bench-prefill.ts --variants, the tests).
 */
export function prefillKernelShape(headDim: number, groupSize: number, suffix?: string, kvKernels = 'bf16'): PrefillKernelShape {
  const configs = PREFILL_BUILDS[headDim];
  if (!configs) throw new Error(`prefill attention: no tensor-core kernel for head dim ${headDim}`);
  const chosen = suffix ?? (headDim !== 128 ? '' : groupSize % 4 === 0 ? '_h4' : groupSize % 2 === 0 ? '' : '_h1');
  const c = configs[chosen];
  if (!c) throw new Error(`prefill attention: no instantiation attention_prefill_bf16_d${headDim}${chosen}`);
  if (groupSize % c.hp !== 0) {
    throw new Error(`prefill attention: ${c.hp} heads a block need a GQA group of a multiple of ${c.hp}, ` +
      `got ${groupSize}`);
  }
  // K and V stages, then Q, in bf16; an FP8 cache's stages arrive as bytes and are widened into one bf16 tile each
  const fp8 = kvKernels.endsWith('_fp8');
  const rows = 2 * (fp8 ? 1 : c.stages) * c.bk + (c.qs ? c.hp * PREFILL_TILE_ROWS : 0);
  const fp8Bytes = fp8 ? 2 * c.stages * c.bk * headDim : 0;
  return { name: `attention_prefill_${kvKernels}_d${headDim}${chosen}`, threads: PREFILL_TILE_ROWS * 2 * c.hp,
    headsPerBlock: c.hp, sharedBytes: rows * (headDim + 8) * 2 + fp8Bytes };
}

/** The tensor-core kernel over the step's prefill tiles (kernels/attention_prefill.cu). */
export function launchPrefillAttention(d: Device, a: AttentionLaunch, numTiles: number): void {
  const L = a.layout;
  const k = prefillKernelShape(a.headDim, a.numHeads / a.numKvHeads, undefined, a.kvKernels);
  d.launch('attention_prefill.cu', k.name, [numTiles, a.numHeads / k.headsPerBlock, 1], k.threads, [
    ptr(a.qkv), ptr(a.k), ptr(a.v), ptr(a.out), ptr(a.meta), word(a, L.blockTables), word(a, L.tiles),
    word(a, L.queryStartLoc), word(a, L.positions), i32(a.numHeads), i32(a.numKvHeads), i32(a.blockSize),
    f32(a.scale)], k.sharedBytes);
}

export interface DecodeGrid {
  /** Query heads per block (a divisor of numHeads / numKvHeads). */
  G: number;
  /** Grid rows: the first `rows` tokens of rowOrder. */
  rows: number;
  gridZ: number;
  /** Most splits of a row (decodeSplitCap: the kernel's split plan and the split states' stride). */
  maxSplits: number;
  /** Split states [rows, numHeads, maxSplits, headDim] and [.., 2] f32, or 0 when no row is shared. */
  partialOut: bigint;
  partialMl: bigint;
  /** [rows, numHeads / G] int32, zero between launches. */
  rowCounters: bigint;
  /** Launched as a dependent (decodeAsDependent): it may start, and read early, before the kernel before ends. */
  dependent: boolean;
}

/**
 * Whether the decode kernel may be a dependent launch. Before waiting for the kernel before, its EARLY builds read
 * the first round of K and V (kernels/attention_decode.cu), which holds no position of the row's own step only when
 * each row is one token (its new position is its last): the batch-invariant mode's prompt chunks also go through
 * the decode kernel, and a chunk's earlier tokens were written by the kernel just before (rope or kv_write), so
 * such a step launches it plainly, after that kernel has finished.
 */
export function decodeAsDependent(batchInvariant: boolean, decodeOnly: boolean): boolean {
  return !batchInvariant || decodeOnly;
}

/** The most tokens a verify row may hold for verifyAsDecode: a page's (k + 1 of a speculative step, k <= 15). */
export const VERIFY_DECODE_MAX_TOKENS = 16;

/**
 * Whether a step's tokens all go through the decode kernel as rows of their own (as the batch-invariant mode sends
 * them): a speculative verify step (ForwardBatch.verify) of at most `maxSeqs` sequences (QUIRE_VERIFY_DECODE_MAX_SEQS;
 * 0: never), none of more than VERIFY_DECODE_MAX_TOKENS tokens. The prefill kernel gives such a step a block a head
 * (a tile of 16 query rows holds a whole verify row): at batch 1, 8 to 32 blocks walking the context on 132 SMs. The
 * decode kernel splits each token's context over blocks and reads K and V once a token (from L2 after the first), so
 * it is the faster where rows are few. A function of the step's row count and lengths: a graph's padded rows decide
 * alike at capture and at replay.
 */
export function verifyAsDecode(batch: Pick<ForwardBatch, 'verify' | 'numSeqs' | 'queryStartLoc'>, maxSeqs: number):
  boolean {
  if (!batch.verify || batch.numSeqs > maxSeqs) return false;
  for (let s = 0; s < batch.numSeqs; s++) {
    if (batch.queryStartLoc[s + 1]! - batch.queryStartLoc[s]! > VERIFY_DECODE_MAX_TOKENS) return false;
  }
  return true;
}

/** The step's qk-norm + rope + kv write, done by the decode kernel itself (a decode-only step). */
export interface DecodeRope {
  /** rope.cu's rope_table for the step: [numTokens, 2, headDim / 2] f32. */
  table: bigint;
  /** [headDim] bf16 each, or 0 (no qk norm). */
  qNorm: bigint;
  kNorm: bigint;
  eps: number;
  /** Rotated pairs of a head: headDim / 2, or fewer (partial rotary: the table's angles past them are 0). */
  rotPairs: number;
}

/**
 * The split-KV kernel over rowOrder's first `rows` tokens (kernels/attention_decode.cu); with `rope`, qkv holds the
 * raw q, k, v and the kernel ropes them and writes the step's k, v to the cache.
 */
export function launchDecodeAttention(d: Device, a: AttentionLaunch, g: DecodeGrid, rope?: DecodeRope): void {
  const L = a.layout;
  // an FP8 cache: 16-byte loads of 16 e4m3 (the _fp8x16 builds, no _w) at every G the backend picks (1 or 2), so a
  // row's bits do not depend on its batch
  const x16 = a.decodeX16 === true;
  if (x16 && g.G > 2) throw new Error(`attention: the FP8 decode kernel is built for G 1 and 2, not ${g.G}`);
  const kv = a.kvKernels ?? 'bf16';
  const want = a.decodeMma ?? 'off';
  if (want !== 'off' && (kv !== 'bf16' || !DECODE_MMA_HEAD_DIMS.includes(a.headDim))) {
    throw new Error(`attention: the tensor-core decode kernel takes a bf16 cache of head dim 64 or 128, not ${kv} ` +
      `of ${a.headDim}`);
  }
  // the _mma builds have no _w, _pre or _hg variants: one build a G, whatever the grid
  const mma = g.G >= mmaFromGroup(want);
  // the CUDA-core kernel's rows split alike in every launch (its batch invariance); the _mma builds' bits are their own
  if (!mma && g.maxSplits !== MAX_SPLITS) {
    throw new Error(`attention: the CUDA-core decode kernel splits a row ${MAX_SPLITS} times at most, ` +
      `not ${g.maxSplits}`);
  }
  const wide = !x16 && !mma && decodeWide(g.rows * (a.numHeads / g.G), g.G, d.numSMs);
  const pre = !x16 && !mma && !wide && decodePrefetch(a.numHeads / g.G * g.rows * g.gridZ, g.G, a.headDim, kv,
    d.numSMs);
  const hg = mma ? 1 : decodeHeadGroups(g.G, a.headDim, kv, a.numHeads, a.numKvHeads, pre, wide);
  const tail = mma ? '_mma' : wide ? '_w' : pre ? '_pre' : hg > 1 ? `_hg${hg}` : '';
  const name = `attention_decode_${kv}${x16 ? 'x16' : ''}_d${a.headDim}_g${g.G}${tail}`;
  d.launch('attention_decode.cu', name, [a.numHeads / g.G / hg, g.rows, g.gridZ],
    DECODE_WARPS * 32 * hg, [ptr(a.qkv), ptr(a.k), ptr(a.v), ptr(a.out), ptr(g.partialOut), ptr(g.partialMl), ptr(g.rowCounters),
      ptr(a.meta), word(a, L.blockTables), word(a, L.tokenToSeq), word(a, L.positions), i32(a.numHeads),
      i32(a.numKvHeads), i32(Math.log2(a.blockSize)), f32(a.scale), i32(SPLIT_TOKENS), i32(LONG_SPLIT_TOKENS),
      i32(SHORT_SPLIT_TOKENS), i32(g.maxSplits), i32(a.numHeads / a.numKvHeads), word(a, L.rowOrder),
      ptr(rope?.table ?? 0n), ptr(rope?.qNorm ?? 0n), ptr(rope?.kNorm ?? 0n), word(a, L.slotMapping),
      f32(rope?.eps ?? 0), i32(rope?.rotPairs ?? a.headDim / 2)], 0, g.dependent,
    decodeCluster(pre && d.arch >= 90, g.gridZ));
}
