// Which decode steps are captured as CUDA graphs (one per batch-size bucket), and the largest step the start-up
// profile run sizes the activations for.

import type { DeviceGraphs } from '../../backend/backend.js';
import type { ForwardBatch } from '../../backend/batch.js';
import { buildForwardBatch, numPromptLogitRows, numSampleRows, type ScheduledSeq } from '../batch-builder.js';

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
 * Captures `forward`'s graph of every bucket up to maxNumSeqs, largest first, over padding rows (one token each, on
 * the null page), under key(bucket); `prepare` completes such a batch first (an MTP head's carry rows). The target's
 * decode graphs (ModelRunner.captureGraphs) and a speculative head's chained forwards' (MtpProposer.captureGraphs).
 */
export function captureBucketGraphs(graphs: DeviceGraphs, maxNumSeqs: number, blockSize: number,
  key: (bucket: number) => number, forward: (batch: ForwardBatch) => Int32Array,
  prepare: (batch: ForwardBatch) => void = () => {}): void {
  for (const bucket of graphBuckets(maxNumSeqs).reverse()) {
    const batch = buildForwardBatch([], blockSize, bucket, true);
    prepare(batch);
    graphs.run(key(bucket), batch, () => forward(batch));
  }
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

/** Graph keys of steps of several tokens a row: MULTI_TOKEN_KEYS * (1024 q + logits rows a row) + bucket. */
const MULTI_TOKEN_KEYS = 1 << 20;

/**
 * Keys of a speculative head's chained one-token forwards (spec/mtp-proposer.ts), on the target's graphs: negative
 * (as logits graphs' -bucket) and beyond every other key (a verify key's 2^20 * (1024 q + rows) + bucket), so no
 * target step's graph is ever replayed for a head's forward or the other way round.
 */
export function headGraphKey(bucket: number): number {
  return -(2 ** 40 + bucket);
}

/**
 * A step whose rows all have q tokens and the same logits rows (a decode step: one token, one row; speculative
 * decoding's verify step: k + 1 and k + 1; a draft's catch-up: 2 and 1) as a CUDA graph's fixed-shape batch, with the
 * graph key of its shape: padded to its batch-size bucket, with rows of one token that write nothing (q = 1, as the
 * decode graphs) or of q tokens on the null page (page 0, which no request holds). Null where the step is of no such
 * shape, has no bucket, or its padded tokens outgrow `maxTokens` (the activations sized at start-up).
 */
export function uniformGraphBatch(seqs: readonly ScheduledSeq[], blockSize: number, maxNumSeqs: number,
  maxTokens: number): { batch: ForwardBatch; key: number } | null {
  const first = seqs[0];
  if (!first) return null;
  const q = first.tokenIds.length;
  const rows = numSampleRows(first);
  if (rows === 0 || q > blockSize || seqs.some((s) => s.tokenIds.length !== q || numSampleRows(s) !== rows || numPromptLogitRows(s) > 0)) return null;
  const bucket = graphBucket(seqs.length, maxNumSeqs);
  if (bucket === null || bucket * q > maxTokens) return null;
  if (q === 1) return { batch: buildForwardBatch(seqs, blockSize, bucket, true), key: bucket };
  const pad: ScheduledSeq = { tokenIds: new Array<number>(q).fill(0), startPosition: 0, blockTable: [0], sample: true,
    specTokenIds: new Array<number>(rows - 1).fill(0) };
  return { batch: buildForwardBatch([...seqs, ...new Array<ScheduledSeq>(bucket - seqs.length).fill(pad)], blockSize),
    key: MULTI_TOKEN_KEYS * (1024 * q + rows) + bucket };
}
