// Paged causal GQA attention on the host.
//
//   KV cache of one layer, K and V alike:
//     [numBlocks][blockSize][numKvHeads][headDim]   slot = page * blockSize + offset
//
//   query token k of sequence i (qLen tokens this step, seqLen after it) sits at
//   kv position p = seqLen - qLen + k and attends to kv positions 0..p, read
//   through page blockTables[i * maxBlocksPerSeq + pos / blockSize].
//
// Two-pass softmax in kv order 0..p: the scores, their max, the sum of exps and
// the weighted sum of V depend only on the query and the cache contents, never on
// how the prompt was chunked or what else is in the batch.

import type { ForwardBatch } from '../batch.js';
import { roundE4m3Into } from '../../loader/fp8.js';

export interface KvLayer {
  k: Float32Array;
  v: Float32Array;
}

export interface AttentionShape {
  numHeads: number;
  numKvHeads: number;
  headDim: number;
  blockSize: number;
}

/**
 * Copies this step's k, v out of qkv [T, (H + 2 KVH) D] into the cache at the slot mapping; `fp8`: each value
 * rounded to FP8 E4M3 as it goes in (the cache stays f32).
 */
export function writeKv(qkv: Float32Array, layer: KvLayer, batch: ForwardBatch,
  shape: AttentionShape, fp8 = false): void {
  const { numHeads, numKvHeads, headDim } = shape;
  const rowWidth = (numHeads + 2 * numKvHeads) * headDim;
  const kvWidth = numKvHeads * headDim;
  for (let t = 0; t < batch.numTokens; t++) {
    const slot = batch.slotMapping[t]!;
    if (slot < 0) continue;
    const kStart = t * rowWidth + numHeads * headDim;
    layer.k.set(qkv.subarray(kStart, kStart + kvWidth), slot * kvWidth);
    layer.v.set(qkv.subarray(kStart + kvWidth, kStart + 2 * kvWidth), slot * kvWidth);
    if (fp8) {
      roundE4m3Into(layer.k.subarray(slot * kvWidth, (slot + 1) * kvWidth));
      roundE4m3Into(layer.v.subarray(slot * kvWidth, (slot + 1) * kvWidth));
    }
  }
}

/** out [T, H D] = softmax(q k^T * scale, causal) v for every query row of the batch. */
export function pagedAttention(qkv: Float32Array, layer: KvLayer, batch: ForwardBatch,
  shape: AttentionShape, scale: number, out: Float32Array): void {
  const { numHeads, numKvHeads, headDim, blockSize } = shape;
  const rowWidth = (numHeads + 2 * numKvHeads) * headDim;
  const kvWidth = numKvHeads * headDim;
  const groupSize = numHeads / numKvHeads;
  let maxSeqLen = 0;
  for (let i = 0; i < batch.numSeqs; i++) maxSeqLen = Math.max(maxSeqLen, batch.seqLens[i]!);
  const scores = new Float64Array(maxSeqLen);
  const slotBase = new Int32Array(maxSeqLen);
  const acc = new Float64Array(headDim);
  for (let i = 0; i < batch.numSeqs; i++) {
    const qStart = batch.queryStartLoc[i]!;
    const qLen = batch.queryStartLoc[i + 1]! - qStart;
    const seqLen = batch.seqLens[i]!;
    const table = i * batch.maxBlocksPerSeq;
    for (let pos = 0; pos < seqLen; pos++) {
      const page = batch.blockTables[table + Math.floor(pos / blockSize)]!;
      slotBase[pos] = (page * blockSize + (pos % blockSize)) * kvWidth;
    }
    for (let j = 0; j < qLen; j++) {
      const t = qStart + j;
      const numKeys = seqLen - qLen + j + 1;
      for (let h = 0; h < numHeads; h++) {
        const qOff = t * rowWidth + h * headDim;
        const kvHeadOff = Math.floor(h / groupSize) * headDim;
        let maxScore = -Infinity;
        for (let p = 0; p < numKeys; p++) {
          const kOff = slotBase[p]! + kvHeadOff;
          let dot = 0;
          for (let d = 0; d < headDim; d++) dot += qkv[qOff + d]! * layer.k[kOff + d]!;
          const s = dot * scale;
          scores[p] = s;
          if (s > maxScore) maxScore = s;
        }
        acc.fill(0);
        let sumExp = 0;
        for (let p = 0; p < numKeys; p++) {
          const e = Math.exp(scores[p]! - maxScore);
          sumExp += e;
          const vOff = slotBase[p]! + kvHeadOff;
          for (let d = 0; d < headDim; d++) acc[d] += e * layer.v[vOff + d]!;
        }
        const oOff = t * numHeads * headDim + h * headDim;
        for (let d = 0; d < headDim; d++) out[oOff + d] = acc[d]! / sumExp;
      }
    }
  }
}
