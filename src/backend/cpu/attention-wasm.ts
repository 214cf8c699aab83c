// Paged causal GQA attention with the wasm SIMD inner loops (see attention.ts for
// the cache layout and wasm-attention.ts for the summation orders), as units of
// work (one sequence, one query head) that any thread may take. Softmax runs in
// JS in kv order 0..p: max, then exp (rounded to f32: the weights the SIMD sum
// uses) and their sum. A unit's result never depends on which thread ran it.

import type { ForwardBatch } from '../batch.js';
import type { WasmAttention } from './wasm-attention.js';

/** Plain numbers, structured-clonable; pointers are byte addresses in the wasm memory. */
export interface AttentionJob {
  qkv: number;
  k: number;
  v: number;
  out: number;
  /** i32 [queryStartLoc (numSeqs + 1) | seqLens (numSeqs) | blockTables (numSeqs * maxBlocksPerSeq)] */
  meta: number;
  numSeqs: number;
  maxBlocksPerSeq: number;
  numHeads: number;
  numKvHeads: number;
  headDim: number;
  blockSize: number;
  scale: number;
  maxSeqLen: number;
  /** Per thread: f32 scores [maxSeqLen] then i32 slots [maxSeqLen]. */
  scratch: number;
}

export function attentionMetaLength(batch: ForwardBatch): number {
  return 2 * batch.numSeqs + 1 + batch.numSeqs * batch.maxBlocksPerSeq;
}

export function writeAttentionMeta(batch: ForwardBatch, meta: Int32Array): void {
  meta.set(batch.queryStartLoc.subarray(0, batch.numSeqs + 1), 0);
  meta.set(batch.seqLens.subarray(0, batch.numSeqs), batch.numSeqs + 1);
  meta.set(batch.blockTables.subarray(0, batch.numSeqs * batch.maxBlocksPerSeq), 2 * batch.numSeqs + 1);
}

export function scratchBytesPerThread(maxSeqLen: number): number {
  return Math.ceil((8 * maxSeqLen) / 64) * 64;
}

/** Unit = seq * numHeads + head: every query row of that sequence, for that head. */
export function runAttentionUnit(kernels: WasmAttention, memory: SharedArrayBuffer, job: AttentionJob,
  unit: number, threadIndex: number): void {
  const { numSeqs, numHeads, numKvHeads, headDim: D, blockSize, maxSeqLen } = job;
  const seq = Math.floor(unit / numHeads);
  const h = unit % numHeads;
  const meta = new Int32Array(memory, job.meta, 2 * numSeqs + 1 + numSeqs * job.maxBlocksPerSeq);
  const scoresPtr = job.scratch + threadIndex * scratchBytesPerThread(maxSeqLen);
  const slotsPtr = scoresPtr + 4 * maxSeqLen;
  const scores = new Float32Array(memory, scoresPtr, maxSeqLen);
  const slots = new Int32Array(memory, slotsPtr, maxSeqLen);
  const qStart = meta[seq]!;
  const qLen = meta[seq + 1]! - qStart;
  const seqLen = meta[numSeqs + 1 + seq]!;
  const table = 2 * numSeqs + 1 + seq * job.maxBlocksPerSeq;
  const kvRowBytes = numKvHeads * D * 4;
  for (let pos = 0; pos < seqLen; pos++) {
    slots[pos] = (meta[table + Math.floor(pos / blockSize)]! * blockSize + (pos % blockSize)) * kvRowBytes;
  }
  const rowWidth = (numHeads + 2 * numKvHeads) * D;
  const headBytes = Math.floor(h / (numHeads / numKvHeads)) * D * 4;
  for (let j = 0; j < qLen; j++) {
    const t = qStart + j;
    const numKeys = seqLen - qLen + j + 1;
    kernels.scores(job.qkv + (t * rowWidth + h * D) * 4, job.k + headBytes, slotsPtr, numKeys, job.scale, scoresPtr, D);
    let maxScore = -Infinity;
    for (let p = 0; p < numKeys; p++) if (scores[p]! > maxScore) maxScore = scores[p]!;
    let sumExp = 0;
    for (let p = 0; p < numKeys; p++) {
      const e = Math.fround(Math.exp(scores[p]! - maxScore));
      scores[p] = e;
      sumExp += e;
    }
    const outPtr = job.out + (t * numHeads + h) * D * 4;
    const out = new Float32Array(memory, outPtr, D);
    out.fill(0);
    kernels.weightedSum(scoresPtr, job.v + headBytes, slotsPtr, numKeys, outPtr, D);
    for (let d = 0; d < D; d++) out[d] = out[d]! / sumExp;
  }
}
