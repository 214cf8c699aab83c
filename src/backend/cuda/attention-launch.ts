// Launches of the two paged attention kernels over a packed step (step-meta.ts): their
// argument lists in one place; which rows go to which kernel, and the grids, are the
// backend's choice (cuda-backend.ts attention()).

import { decodeWide, LONG_SPLIT_TOKENS, MAX_SPLITS, SHORT_SPLIT_TOKENS, SPLIT_TOKENS } from './decode-splits.js';
import { f32, i32, ptr, type Device, type KernelArg } from './device.js';
import type { MetaLayout } from './step-meta.js';

export interface AttentionLaunch {
  /** [numTokens, (numHeads + 2 numKvHeads) headDim] bf16; the step's k and v already in the cache. */
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
}

const word = (a: AttentionLaunch, offset: number): KernelArg => ptr(a.meta + BigInt(offset * 4));

/** The tensor-core kernel over the step's prefill tiles (kernels/attention_prefill.cu): a warp per 16 tile rows. */
export function launchPrefillAttention(d: Device, a: AttentionLaunch, numTiles: number): void {
  const L = a.layout;
  d.launch('attention_prefill.cu', `attention_prefill_bf16_d${a.headDim}`, [numTiles, a.numHeads, 1], 128, [
    ptr(a.qkv), ptr(a.k), ptr(a.v), ptr(a.out), ptr(a.meta), word(a, L.blockTables), word(a, L.tiles),
    word(a, L.queryStartLoc), word(a, L.positions), i32(a.numHeads), i32(a.numKvHeads), i32(a.blockSize),
    f32(a.scale)]);
}

export interface DecodeGrid {
  /** Query heads per block (a divisor of numHeads / numKvHeads). */
  G: number;
  /** Grid rows: the first `rows` tokens of rowOrder. */
  rows: number;
  gridZ: number;
  /** Split states [rows, numHeads, MAX_SPLITS, headDim] and [.., 2] f32, or 0 when no row is shared. */
  partialOut: bigint;
  partialMl: bigint;
  /** [rows, numHeads / G] int32, zero between launches. */
  rowCounters: bigint;
}

/** The split-KV kernel over rowOrder's first `rows` tokens (kernels/attention_decode.cu). */
export function launchDecodeAttention(d: Device, a: AttentionLaunch, g: DecodeGrid): void {
  const L = a.layout;
  const wide = decodeWide(g.rows * (a.numHeads / g.G), g.G, d.numSMs);
  const name = `attention_decode_bf16_d${a.headDim}_g${g.G}${wide ? '_w' : ''}`;
  d.launch('attention_decode.cu', name, [a.numHeads / g.G, g.rows, g.gridZ],
    128, [ptr(a.qkv), ptr(a.k), ptr(a.v), ptr(a.out), ptr(g.partialOut), ptr(g.partialMl), ptr(g.rowCounters),
      ptr(a.meta), word(a, L.blockTables), word(a, L.tokenToSeq), word(a, L.positions), i32(a.numHeads),
      i32(a.numKvHeads), i32(Math.log2(a.blockSize)), f32(a.scale), i32(SPLIT_TOKENS), i32(LONG_SPLIT_TOKENS),
      i32(SHORT_SPLIT_TOKENS), i32(MAX_SPLITS), i32(a.numHeads / a.numKvHeads), word(a, L.rowOrder)], 0, true);
}
