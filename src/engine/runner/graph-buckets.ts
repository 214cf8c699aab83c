// Which decode steps are captured as CUDA graphs (one per batch-size bucket), and the largest step the start-up
// profile run sizes the activations for.

import type { ScheduledSeq } from '../batch-builder.js';

/** Decode graph buckets: 1, 2, 4, 8, 16, 24, 32, ... (steps of 8) up to maxNumSeqs; null above. */
export function graphBucket(numSeqs: number, maxNumSeqs: number): number | null {
  if (numSeqs > maxNumSeqs) return null;
  const bucket = numSeqs <= 8 ? 2 ** Math.ceil(Math.log2(Math.max(1, numSeqs))) : Math.ceil(numSeqs / 8) * 8;
  return Math.min(bucket, Math.max(maxNumSeqs, numSeqs));
}

/** Every decode graph bucket up to maxNumSeqs, ascending. */
export function graphBuckets(maxNumSeqs: number): number[] {
  const out = new Set<number>();
  for (let n = 1; n <= maxNumSeqs; n++) out.add(graphBucket(n, maxNumSeqs)!);
  return [...out];
}

/**
 * The step that needs the most activation memory: the whole token budget in
 * maxNumSeqs sequences (one-token rows plus prompts of at most maxModelLen), each
 * sampled, written to the null page (block 0). Run once before graphs are captured.
 */
export function largestStep(maxNumBatchedTokens: number, maxNumSeqs: number, maxModelLen: number,
  blockSize: number): ScheduledSeq[] {
  const seq = (n: number): ScheduledSeq => ({ tokenIds: new Array<number>(n).fill(0), startPosition: 0,
    blockTable: new Array<number>(Math.ceil(n / blockSize)).fill(0), sample: true });
  const numSeqs = Math.min(maxNumSeqs, maxNumBatchedTokens);
  let numLong = 1;
  while (numLong < numSeqs && maxNumBatchedTokens - (numSeqs - numLong) > numLong * maxModelLen) numLong++;
  const out: ScheduledSeq[] = [];
  let left = Math.min(maxNumBatchedTokens - (numSeqs - numLong), numLong * maxModelLen);
  for (let i = 0; i < numLong; i++) {
    const n = Math.min(maxModelLen, Math.ceil(left / (numLong - i)));
    out.push(seq(n));
    left -= n;
  }
  while (out.length < numSeqs) out.push(seq(1));
  return out;
}
