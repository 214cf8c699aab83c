// Turns the scheduler's plain per-sequence plan into the flat ForwardBatch the
// model runs (see src/model/batch.ts for the layout).

import type { ForwardBatch } from '../model/batch.js';

export interface ScheduledSeq {
  /** Tokens fed this step (a prompt chunk, or the last sampled token). */
  tokenIds: readonly number[];
  /** Position of tokenIds[0] in the sequence (= tokens already in the cache). */
  startPosition: number;
  /** Pages of this sequence, in order; must cover startPosition + tokenIds.length. */
  blockTable: readonly number[];
  /** Whether logits are wanted for the last token (end of prompt, or decode). */
  sample: boolean;
}

/** Pads to `padToNumSeqs` one-token rows; with `samplePadding` they yield logits too (fixed-shape graphs). */
export function buildForwardBatch(seqs: readonly ScheduledSeq[], blockSize: number,
  padToNumSeqs = seqs.length, samplePadding = false): ForwardBatch {
  let numTokens = 0;
  let maxBlocksPerSeq = 1;
  let numLogits = 0;
  for (const s of seqs) {
    numTokens += s.tokenIds.length;
    maxBlocksPerSeq = Math.max(maxBlocksPerSeq, s.blockTable.length);
    if (s.sample) numLogits++;
  }
  const numPad = padToNumSeqs - seqs.length;
  numTokens += numPad;
  if (samplePadding) numLogits += numPad;
  const numSeqs = padToNumSeqs;
  const inputIds = new Int32Array(numTokens);
  const positions = new Int32Array(numTokens);
  const slotMapping = new Int32Array(numTokens).fill(-1);
  const queryStartLoc = new Int32Array(numSeqs + 1);
  const seqLens = new Int32Array(numSeqs);
  const blockTables = new Int32Array(numSeqs * maxBlocksPerSeq);
  const logitsIndices = new Int32Array(numLogits);
  let t = 0;
  let l = 0;
  seqs.forEach((s, i) => {
    const end = s.startPosition + s.tokenIds.length;
    if (Math.ceil(end / blockSize) > s.blockTable.length) {
      throw new Error(`sequence ${i}: ${end} tokens need ${Math.ceil(end / blockSize)} pages, block table has ${s.blockTable.length}`);
    }
    queryStartLoc[i] = t;
    for (let j = 0; j < s.tokenIds.length; j++, t++) {
      const pos = s.startPosition + j;
      inputIds[t] = s.tokenIds[j]!;
      positions[t] = pos;
      slotMapping[t] = s.blockTable[Math.floor(pos / blockSize)]! * blockSize + (pos % blockSize);
    }
    seqLens[i] = end;
    blockTables.set(s.blockTable, i * maxBlocksPerSeq);
    if (s.sample) logitsIndices[l++] = t - 1;
  });
  // Padding rows (for fixed-shape decode graphs): one token each, position 0,
  // no KV write, attending to nothing but themselves through page 0.
  for (let i = seqs.length; i < numSeqs; i++, t++) {
    queryStartLoc[i] = t;
    seqLens[i] = 1;
    if (samplePadding) logitsIndices[l++] = t;
  }
  queryStartLoc[numSeqs] = t;
  return { numTokens, numSeqs, inputIds, positions, slotMapping, queryStartLoc, seqLens,
    blockTables, maxBlocksPerSeq, logitsIndices };
}
