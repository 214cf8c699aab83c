// Turns the scheduler's plain per-sequence plan into the flat ForwardBatch the
// model runs (see src/model/batch.ts for the layout).

import type { ForwardBatch } from '../backend/batch.js';

export interface ScheduledSeq {
  /** Tokens fed this step (a prompt chunk, or the last sampled token). */
  tokenIds: readonly number[];
  /** Position of tokenIds[0] in the sequence (= tokens already in the cache). */
  startPosition: number;
  /** Pages of this sequence, in order; must cover startPosition + tokenIds.length. */
  blockTable: readonly number[];
  /** Whether logits are wanted for the last token (end of prompt, or decode). */
  sample: boolean;
  /** Positions [promptLogitsFrom, promptLogitsTo) of this chunk whose logits are wanted too (prompt logprobs). */
  promptLogitsFrom?: number;
  promptLogitsTo?: number;
  /** Its recurrent-state slot (a hybrid model's; the scheduler's row carries it); absent on other models. */
  stateSlot?: number;
  /**
   * Proposed tokens at the end of tokenIds (speculative decoding): a sampled row then wants the logits of its last
   * 1 + specTokenIds.length positions, to verify each proposal and pick the token after them.
   */
  specTokenIds?: readonly number[];
}

/** Logits rows a sampled sequence takes: one, or one per verified position with proposals. */
export function numSampleRows(s: ScheduledSeq): number {
  return s.sample ? 1 + (s.specTokenIds?.length ?? 0) : 0;
}

/** Extra logits rows of a sequence: its prompt positions whose logits are wanted. */
export function numPromptLogitRows(s: ScheduledSeq): number {
  return Math.max(0, (s.promptLogitsTo ?? 0) - (s.promptLogitsFrom ?? 0));
}

/**
 * Pads to `padToNumSeqs` one-token rows; with `samplePadding` they yield logits too (fixed-shape graphs).
 * logitsIndices: the sampled rows (a sequence each, in order; numSampleRows consecutive positions for one with
 * proposals), then the padding's, then every sequence's prompt logit positions (numPromptLogitRows each, in
 * sequence and position order).
 */
export function buildForwardBatch(seqs: readonly ScheduledSeq[], blockSize: number,
  padToNumSeqs = seqs.length, samplePadding = false): ForwardBatch {
  let numTokens = 0;
  let maxBlocksPerSeq = 1;
  let numLogits = 0;
  for (const s of seqs) {
    numTokens += s.tokenIds.length;
    maxBlocksPerSeq = Math.max(maxBlocksPerSeq, s.blockTable.length);
    numLogits += numSampleRows(s) + numPromptLogitRows(s);
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
  // a hybrid model's rows name their state slots; padding rows have none (-1: a zero state, nothing kept)
  const stateSlots = seqs.some((s) => s.stateSlot !== undefined) ? new Int32Array(numSeqs).fill(-1) : undefined;
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
    if (stateSlots) stateSlots[i] = s.stateSlot ?? -1;
    for (let j = numSampleRows(s); j > 0; j--) logitsIndices[l++] = t - j;
  });
  // Padding rows (for fixed-shape decode graphs): one token each, position 0,
  // no KV write, attending to nothing but themselves through page 0.
  for (let i = seqs.length; i < numSeqs; i++, t++) {
    queryStartLoc[i] = t;
    seqLens[i] = 1;
    if (samplePadding) logitsIndices[l++] = t;
  }
  queryStartLoc[numSeqs] = t;
  seqs.forEach((s, i) => {
    for (let p = s.promptLogitsFrom ?? 0; p < (s.promptLogitsTo ?? 0); p++) {
      if (p < s.startPosition || p >= s.startPosition + s.tokenIds.length) {
        throw new Error(`sequence ${i}: prompt logit position ${p} outside its chunk [${s.startPosition}, ${s.startPosition + s.tokenIds.length})`);
      }
      logitsIndices[l++] = queryStartLoc[i]! + p - s.startPosition;
    }
  });
  return { numTokens, numSeqs, inputIds, positions, slotMapping, queryStartLoc, seqLens,
    blockTables, maxBlocksPerSeq, logitsIndices, ...(stateSlots ? { stateSlots } : {}) };
}
