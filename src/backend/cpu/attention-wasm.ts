// Paged causal GQA attention with the wasm SIMD inner loops (see attention.ts for
// the cache layout and wasm-attention.ts for the summation orders). Softmax runs
// here in kv order 0..p: max, then exp (rounded to f32, the weights the SIMD sum
// uses) and their sum.

import type { ForwardBatch } from '../../model/batch.js';
import type { AttentionShape } from './attention.js';
import type { WasmAttention } from './wasm-attention.js';

/** Byte addresses in the wasm memory. */
export interface WasmAttentionBuffers {
  qkv: number;
  k: number;
  v: number;
  out: number;
  /** f32 [maxSeqLen] scratch. */
  scores: number;
  /** i32 [maxSeqLen] scratch. */
  slots: number;
}

export function pagedAttentionWasm(kernels: WasmAttention, memory: SharedArrayBuffer, at: WasmAttentionBuffers,
  batch: ForwardBatch, shape: AttentionShape, scale: number): void {
  const { numHeads, numKvHeads, headDim: D, blockSize } = shape;
  const rowWidth = (numHeads + 2 * numKvHeads) * D;
  const kvRowBytes = numKvHeads * D * 4;
  const groupSize = numHeads / numKvHeads;
  let maxSeqLen = 0;
  for (let i = 0; i < batch.numSeqs; i++) maxSeqLen = Math.max(maxSeqLen, batch.seqLens[i]!);
  const scores = new Float32Array(memory, at.scores, maxSeqLen);
  const slots = new Int32Array(memory, at.slots, maxSeqLen);
  const out = new Float32Array(memory, at.out, batch.numTokens * numHeads * D);
  for (let i = 0; i < batch.numSeqs; i++) {
    const qStart = batch.queryStartLoc[i]!;
    const qLen = batch.queryStartLoc[i + 1]! - qStart;
    const seqLen = batch.seqLens[i]!;
    const table = i * batch.maxBlocksPerSeq;
    for (let pos = 0; pos < seqLen; pos++) {
      const page = batch.blockTables[table + Math.floor(pos / blockSize)]!;
      slots[pos] = (page * blockSize + (pos % blockSize)) * kvRowBytes;
    }
    for (let j = 0; j < qLen; j++) {
      const t = qStart + j;
      const numKeys = seqLen - qLen + j + 1;
      for (let h = 0; h < numHeads; h++) {
        const headBytes = Math.floor(h / groupSize) * D * 4;
        kernels.scores(at.qkv + (t * rowWidth + h * D) * 4, at.k + headBytes, at.slots, numKeys, scale, at.scores, D);
        let maxScore = -Infinity;
        for (let p = 0; p < numKeys; p++) if (scores[p]! > maxScore) maxScore = scores[p]!;
        let sumExp = 0;
        for (let p = 0; p < numKeys; p++) {
          const e = Math.fround(Math.exp(scores[p]! - maxScore));
          scores[p] = e;
          sumExp += e;
        }
        const oOff = (t * numHeads + h) * D;
        out.fill(0, oOff, oOff + D);
        kernels.weightedSum(at.scores, at.v + headBytes, at.slots, numKeys, at.out + oOff * 4, D);
        for (let d = 0; d < D; d++) out[oOff + d] = out[oOff + d]! / sumExp;
      }
    }
  }
}
