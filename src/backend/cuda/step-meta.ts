// One step's metadata packed into ONE int32 buffer (pinned on the host, copied
// to the device with one async HtoD). The buffers are sized for the largest
// step (the capacity layout); a step packs into a layout of its own shape
// (stepLayout: its tokens, logits rows and sequences, the capacity's block-table
// stride), so it copies only that, and a captured graph, whose steps are padded
// to its bucket, replays the same offsets; counts live in the header:
//
//   | header (16) | inputIds | positions | slotMapping | tokenToSeq | logitsIndices | rowOrder | carryRows |   <- capTokens each
//   | queryStartLoc (capSeqs + 1) | seqLens (capSeqs) | stateSlots (capSeqs) | tiles (2 capTiles) |
//   | blockTables (capSeqs * stride) |
//   | sampling: temperature, topK, topP, minP, uniform (capTokens each; floats as f32 bits) |

import type { ForwardBatch } from '../batch.js';

export const HEADER_WORDS = 16;
/** Header word offsets; the kernels read the first three as #defines (kernel-defines.ts). */
export const META_NUM_TOKENS = 0;
export const META_NUM_SEQS = 1;
export const META_BLOCK_TABLE_STRIDE = 2;
export const META_NUM_LOGITS = 3;
/** Query rows per prefill attention tile (BQ of attention_prefill.cu's builds, a #define: 4 warps of 16 rows). */
export const PREFILL_TILE_ROWS = 64;

export interface MetaLayout {
  capTokens: number;
  capSeqs: number;
  capTiles: number;
  blockTableStride: number;
  inputIds: number;
  positions: number;
  slotMapping: number;
  tokenToSeq: number;
  logitsIndices: number;
  /**
   * The order the decode attention kernel takes its rows in (grid y -> token): first the step's one-token rows
   * (decode rows; in a mixed step the decode kernel serves them and the prefill kernel the rest) by kv length,
   * longest first, so the longest rows start first and no SM is left with one long row at the end (a
   * longest-processing-time-first schedule); then every other row in token order (the batch-invariant mode runs
   * them all through the decode kernel). Which block runs a row changes no bit.
   */
  rowOrder: number;
  /** ForwardBatch.carryRows: each token's row of the kept hidden states (an MTP head's steps; unset on others). */
  carryRows: number;
  queryStartLoc: number;
  seqLens: number;
  /** A hybrid model's recurrent-state slot per sequence (-1: none; every sequence of other models). */
  stateSlots: number;
  tiles: number;
  blockTables: number;
  /** RowSampling, SAMPLING_FIELDS sections of capTokens words (kernels/sample.cu). */
  sampling: number;
  totalWords: number;
}

export const SAMPLING_FIELDS = 5;

export function metaLayout(capTokens: number, capSeqs: number, blockTableStride: number): MetaLayout {
  const capTiles = capSeqs + Math.ceil(capTokens / PREFILL_TILE_ROWS);
  let at = HEADER_WORDS;
  const take = (n: number): number => {
    const start = at;
    at += Math.ceil(n / 4) * 4;
    return start;
  };
  const inputIds = take(capTokens);
  const positions = take(capTokens);
  const slotMapping = take(capTokens);
  const tokenToSeq = take(capTokens);
  const logitsIndices = take(capTokens);
  const rowOrder = take(capTokens);
  const carryRows = take(capTokens);
  const queryStartLoc = take(capSeqs + 1);
  const seqLens = take(capSeqs);
  const stateSlots = take(capSeqs);
  const tiles = take(2 * capTiles);
  const blockTables = take(capSeqs * blockTableStride);
  const sampling = take(SAMPLING_FIELDS * capTokens);
  return {
    capTokens, capSeqs, capTiles, blockTableStride, inputIds, positions, slotMapping, tokenToSeq, logitsIndices,
    rowOrder, carryRows, queryStartLoc, seqLens, stateSlots, tiles, blockTables, sampling, totalWords: at,
  };
}

function nextPow2(n: number, min: number): number {
  let v = min;
  while (v < n) v *= 2;
  return v;
}

/**
 * The layout one step packs into: the buffers' (`capacity`, what the largest step needs) cut to this step's tokens,
 * logits rows and sequences, with the capacity's block-table stride. The step's metadata copy is then its own size
 * (a decode step of one sequence: ~1 KB, not the capacity's ~630 KB), and a captured graph's, whose steps are padded
 * to their bucket, is the same at every replay. Sections sit where this layout puts them: kernels take their
 * offsets (and the sampling sections' spacing) from it at each launch.
 */
export function stepLayout(batch: ForwardBatch, capacity: MetaLayout): MetaLayout {
  const numTokens = Math.max(batch.numTokens, batch.logitsIndices.length);
  if (numTokens > capacity.capTokens || batch.numSeqs > capacity.capSeqs) {
    throw new Error(`stepLayout: ${numTokens} tokens / ${batch.numSeqs} sequences over the capacity's ${capacity.capTokens} / ${capacity.capSeqs}`);
  }
  return metaLayout(numTokens, batch.numSeqs, capacity.blockTableStride);
}

/** `layout` if the batch fits it, otherwise a layout grown (in powers of two) to fit it. */
export function layoutFor(batch: ForwardBatch, layout: MetaLayout | null): MetaLayout {
  return layoutAtLeast(layout, Math.max(batch.numTokens, batch.logitsIndices.length), batch.numSeqs,
    batch.maxBlocksPerSeq);
}

/** `layout` if it holds these capacities, otherwise one grown (in powers of two) to hold them. */
export function layoutAtLeast(layout: MetaLayout | null, numTokens: number, numSeqs: number,
  maxBlocksPerSeq: number): MetaLayout {
  if (layout && numTokens <= layout.capTokens && numSeqs <= layout.capSeqs &&
    maxBlocksPerSeq <= layout.blockTableStride) return layout;
  return metaLayout(
    Math.max(layout?.capTokens ?? 0, nextPow2(numTokens, 256)),
    Math.max(layout?.capSeqs ?? 0, nextPow2(numSeqs, 64)),
    Math.max(layout?.blockTableStride ?? 0, nextPow2(maxBlocksPerSeq, 64)));
}

export interface PackedStep {
  /** Prefill attention tiles: of the sequences with more than one query token. */
  numTiles: number;
  /** Sequences with exactly one query token (decode rows), the head of rowOrder. */
  numDecodeRows: number;
  /** Every sequence has exactly one query token this step. */
  decodeOnly: boolean;
}

/** Writes the batch into `words` (layout.totalWords long). */
export function packStep(batch: ForwardBatch, layout: MetaLayout, words: Int32Array): PackedStep {
  const { numTokens, numSeqs, maxBlocksPerSeq } = batch;
  const numLogits = batch.logitsIndices.length;
  words[META_NUM_TOKENS] = numTokens;
  words[META_NUM_SEQS] = numSeqs;
  words[META_BLOCK_TABLE_STRIDE] = layout.blockTableStride;
  words[META_NUM_LOGITS] = numLogits;
  words.set(batch.inputIds.subarray(0, numTokens), layout.inputIds);
  words.set(batch.positions.subarray(0, numTokens), layout.positions);
  words.set(batch.slotMapping.subarray(0, numTokens), layout.slotMapping);
  words.set(batch.logitsIndices, layout.logitsIndices);
  if (batch.carryRows) words.set(batch.carryRows.subarray(0, numTokens), layout.carryRows);
  words.set(batch.queryStartLoc.subarray(0, numSeqs + 1), layout.queryStartLoc);
  words.set(batch.seqLens.subarray(0, numSeqs), layout.seqLens);
  if (batch.stateSlots) words.set(batch.stateSlots.subarray(0, numSeqs), layout.stateSlots);
  else words.fill(-1, layout.stateSlots, layout.stateSlots + numSeqs);
  words.fill(-1, layout.tokenToSeq, layout.tokenToSeq + numTokens);
  for (let s = 0; s < numSeqs; s++) {
    const start = batch.queryStartLoc[s]!;
    const end = batch.queryStartLoc[s + 1]!;
    words.fill(s, layout.tokenToSeq + start, layout.tokenToSeq + end);
    const rowAt = layout.blockTables + s * layout.blockTableStride;
    words.set(batch.blockTables.subarray(s * maxBlocksPerSeq, (s + 1) * maxBlocksPerSeq), rowAt);
    words.fill(0, rowAt + maxBlocksPerSeq, rowAt + layout.blockTableStride);
  }
  const numTiles = packTiles(batch.queryStartLoc, numSeqs, PREFILL_TILE_ROWS, words, layout.tiles, 2);
  const numDecodeRows = packRowOrder(batch.queryStartLoc, numSeqs, batch.positions, words, layout.rowOrder);
  packSampling(batch, layout, words);
  return { numTiles, numDecodeRows, decodeOnly: numDecodeRows === numSeqs };
}

/**
 * The (sequence, first row) pairs of every tile of `tileRows` query rows, a
 * sequence's tiles in row order, written at `words[at..]`, for the sequences of
 * at least `minRows` rows. Returns the count.
 */
export function packTiles(queryStartLoc: Int32Array, numSeqs: number, tileRows: number, words: Int32Array,
  at: number, minRows = 1): number {
  let numTiles = 0;
  for (let s = 0; s < numSeqs; s++) {
    if (queryStartLoc[s + 1]! - queryStartLoc[s]! < minRows) continue;
    for (let row = queryStartLoc[s]!; row < queryStartLoc[s + 1]!; row += tileRows) {
      words[at + 2 * numTiles] = s;
      words[at + 2 * numTiles + 1] = row;
      numTiles++;
    }
  }
  return numTiles;
}

/** Row keys hold the token index in their low ORDER_BITS bits (tokens per step stay far below 2^21). */
const ORDER_BITS = 2 ** 21;

/**
 * Writes rowOrder at `words[at..]` (see MetaLayout.rowOrder): the one-token sequences' rows by kv length
 * (position + 1), longest first, ties in token order; then every other row in token order. Returns the count
 * of one-token rows.
 */
export function packRowOrder(queryStartLoc: Int32Array, numSeqs: number, positions: Int32Array, words: Int32Array,
  at: number): number {
  if (queryStartLoc[numSeqs]! >= ORDER_BITS) throw new Error(`packRowOrder: ${queryStartLoc[numSeqs]} tokens in one step`);
  // one numeric sort of exact keys (position * 2^21 + reversed index < 2^53), read from the top
  const keys = new Float64Array(numSeqs);
  let n = 0;
  for (let s = 0; s < numSeqs; s++) {
    const t = queryStartLoc[s]!;
    if (queryStartLoc[s + 1]! - t === 1) keys[n++] = positions[t]! * ORDER_BITS + (ORDER_BITS - 1 - t);
  }
  const sorted = keys.subarray(0, n).sort();
  for (let i = 0; i < n; i++) words[at + i] = ORDER_BITS - 1 - (sorted[n - 1 - i]! % ORDER_BITS);
  let k = n;
  for (let s = 0; s < numSeqs; s++) {
    const [start, end] = [queryStartLoc[s]!, queryStartLoc[s + 1]!];
    if (end - start !== 1) for (let t = start; t < end; t++) words[at + k++] = t;
  }
  return n;
}

function packSampling(batch: ForwardBatch, layout: MetaLayout, words: Int32Array): void {
  const n = batch.logitsIndices.length;
  const at = layout.sampling;
  const cap = layout.capTokens;
  const s = batch.sampling;
  if (!s) {
    words.fill(0, at, at + n);
    return;
  }
  const floats = new Float32Array(words.buffer, words.byteOffset, words.length);
  floats.set(s.temperature.subarray(0, n), at);
  words.set(s.topK.subarray(0, n), at + cap);
  floats.set(s.topP.subarray(0, n), at + 2 * cap);
  floats.set(s.minP.subarray(0, n), at + 3 * cap);
  floats.set(s.uniform.subarray(0, n), at + 4 * cap);
}
