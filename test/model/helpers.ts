import assert from 'node:assert/strict';
import type { ScheduledSeq } from '../../src/engine/batch-builder.js';
import type { Model } from '../../src/model/model.js';
import { batchOf, shuffled } from '../backend/helpers.js';

export interface Chunk {
  seq: string;
  start: number;
  end: number;
}

/** Runs steps of chunks over prompts, pages handed out from a scrambled free list; logits of every token by seq. */
export function runSteps(model: Model, prompts: Record<string, number[]>, steps: Chunk[][], pageSeed: number,
  blockSize = 16, numBlocks = 64): Map<string, Float32Array[]> {
  model.backend.allocateKvCache(model.kvCacheSpec(numBlocks, blockSize));
  const free = shuffled(numBlocks, pageSeed);
  const pages = new Map<string, number[]>();
  const logits = new Map<string, Float32Array[]>();
  const vocab = model.config.vocabSize;
  for (const plan of steps) {
    const seqs = plan.map((c) => {
      const owned = pages.get(c.seq) ?? [];
      while (owned.length * blockSize < c.end) owned.push(free.pop()!);
      pages.set(c.seq, owned);
      return { ids: prompts[c.seq]!.slice(c.start, c.end), start: c.start, pages: owned };
    });
    const numTokens = seqs.reduce((n, s) => n + s.ids.length, 0);
    const out = model.forward(batchOf(seqs, blockSize, Array.from({ length: numTokens }, (_, i) => i)));
    let row = 0;
    for (const c of plan) {
      const rows = logits.get(c.seq) ?? [];
      for (let p = c.start; p < c.end; p++, row++) rows[p] = out.slice(row * vocab, (row + 1) * vocab);
      logits.set(c.seq, rows);
    }
  }
  return logits;
}

export function chunked(seq: string, len: number, size: number): Chunk[][] {
  const steps: Chunk[][] = [];
  for (let s = 0; s < len; s += size) steps.push([{ seq, start: s, end: Math.min(len, s + size) }]);
  return steps;
}

/** A hybrid model's step: sequences with their recurrent-state slots -> logits of the sampled rows. */
export type SlotStep = (seqs: (ScheduledSeq & { slot: number })[]) => Float32Array;

/**
 * Two prompts batched in one step (slots 2 and 3, pages 3 and 4) give the bits each gives alone: neither reads the
 * other's state or pages. Returns the second prompt, for a caller that continues both.
 */
export function assertBatchedAsAlone(step: SlotStep, prompt: number[]): number[] {
  const other = [9, 8, 7, 6];
  const alone = [step([{ tokenIds: prompt, startPosition: 0, blockTable: [3], sample: true, slot: 2 }]),
    step([{ tokenIds: other, startPosition: 0, blockTable: [4], sample: true, slot: 3 }])];
  const together = step([{ tokenIds: prompt, startPosition: 0, blockTable: [3], sample: true, slot: 2 },
    { tokenIds: other, startPosition: 0, blockTable: [4], sample: true, slot: 3 }]);
  assert.deepEqual(together, Float32Array.from([...alone[0]!, ...alone[1]!]));
  return other;
}
