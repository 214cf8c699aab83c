import { test } from 'node:test';
import assert from 'node:assert/strict';
import { buildForwardBatch, type ScheduledSeq } from '../../src/engine/batch-builder.js';
import { uniformGraphBatch } from '../../src/engine/runner/graph-buckets.js';

test('flat batch of a prefill chunk and a decode token', () => {
  const b = buildForwardBatch([
    { tokenIds: [10, 11, 12], startPosition: 3, blockTable: [7, 2], sample: false },
    { tokenIds: [99], startPosition: 5, blockTable: [4, 9], sample: true },
  ], 4);
  assert.equal(b.numTokens, 4);
  assert.deepEqual([...b.inputIds], [10, 11, 12, 99]);
  assert.deepEqual([...b.positions], [3, 4, 5, 5]);
  // pos 3 -> page 7 slot 3; pos 4,5 -> page 2 slots 0,1; seq1 pos 5 -> page 9 slot 1
  assert.deepEqual([...b.slotMapping], [7 * 4 + 3, 2 * 4 + 0, 2 * 4 + 1, 9 * 4 + 1]);
  assert.deepEqual([...b.queryStartLoc], [0, 3, 4]);
  assert.deepEqual([...b.seqLens], [6, 6]);
  assert.deepEqual([...b.blockTables], [7, 2, 4, 9]);
  assert.deepEqual([...b.logitsIndices], [3]);
});

test('a hybrid model\'s rows carry their state slots into the batch; padding rows none; other models no stateSlots', () => {
  const rows = [
    { tokenIds: [10, 11], startPosition: 0, blockTable: [7], sample: true, stateSlot: 3 },
    { tokenIds: [99], startPosition: 5, blockTable: [4, 9], sample: true, stateSlot: 0 },
  ];
  assert.deepEqual([...buildForwardBatch(rows, 4).stateSlots!], [3, 0]);
  assert.deepEqual([...buildForwardBatch(rows, 4, 4, true).stateSlots!], [3, 0, -1, -1]);
  assert.equal(buildForwardBatch(rows.map(({ stateSlot: _, ...r }) => r), 4).stateSlots, undefined);
});

test('padding rows write no KV and keep a fixed shape', () => {
  const b = buildForwardBatch([{ tokenIds: [5], startPosition: 0, blockTable: [3], sample: true }], 16, 4);
  assert.equal(b.numSeqs, 4);
  assert.equal(b.numTokens, 4);
  assert.deepEqual([...b.slotMapping], [48, -1, -1, -1]);
  assert.deepEqual([...b.queryStartLoc], [0, 1, 2, 3, 4]);
  assert.deepEqual([...b.logitsIndices], [0]);
});

test('a block table too short for the tokens is an error', () => {
  assert.throws(() => buildForwardBatch([{ tokenIds: [1, 2, 3], startPosition: 2, blockTable: [0], sample: true }], 4),
    /need 2 pages/);
});

test('sampled padding rows keep the logits shape fixed at the bucket size', () => {
  const b = buildForwardBatch([{ tokenIds: [5], startPosition: 3, blockTable: [2], sample: true }], 16, 4, true);
  assert.deepEqual([...b.logitsIndices], [0, 1, 2, 3]);
});

test('graph buckets: powers of two to 8, then steps of 8, none above maxNumSeqs', async () => {
  const { graphBucket } = await import('../../src/engine/runner/graph-buckets.js');
  assert.deepEqual([1, 2, 3, 5, 8, 9, 17, 24, 25].map((n) => graphBucket(n, 256)), [1, 2, 4, 8, 8, 16, 24, 24, 32]);
  assert.equal(graphBucket(300, 256), null);
  assert.equal(graphBucket(6, 6), 6);
  const { graphBuckets } = await import('../../src/engine/runner/graph-buckets.js');
  assert.deepEqual(graphBuckets(40), [1, 2, 4, 8, 16, 24, 32, 40]);
  assert.deepEqual(graphBuckets(6), [1, 2, 4, 6]);
  assert.equal(graphBuckets(256).length, 35);
});

test('largestStep fills the token budget with maxNumSeqs sampled sequences no longer than maxModelLen', async () => {
  const { largestStep } = await import('../../src/engine/runner/graph-buckets.js');
  for (const [budget, maxSeqs, maxLen] of [[8192, 256, 4096], [2048, 256, 40960], [8192, 4, 1000], [100, 256, 4096],
    [16384, 256, 512]] as const) {
    const seqs = largestStep(budget, maxSeqs, maxLen, 16);
    const lens = seqs.map((s) => s.tokenIds.length);
    assert.equal(seqs.length, Math.min(maxSeqs, budget), `${budget}/${maxSeqs}/${maxLen}`);
    assert.ok(lens.every((n) => n >= 1 && n <= maxLen));
    assert.equal(lens.reduce((a, b) => a + b, 0), Math.min(budget, seqs.length * maxLen));
    assert.ok(seqs.every((s) => s.sample && s.blockTable.length === Math.ceil(s.tokenIds.length / 16)));
  }
});

test('prompt logit positions come after the sampled rows, a row each, in sequence and position order', () => {
  const b = buildForwardBatch([
    { tokenIds: [10, 11, 12, 13], startPosition: 2, blockTable: [7, 2], sample: false, promptLogitsFrom: 3, promptLogitsTo: 6 },
    { tokenIds: [99], startPosition: 5, blockTable: [4, 9], sample: true },
    { tokenIds: [20, 21], startPosition: 0, blockTable: [5], sample: true, promptLogitsFrom: 0, promptLogitsTo: 1 },
  ], 4);
  // sampled: seq 1's token (row 4), seq 2's last (row 6); then seq 0's positions 3, 4, 5 (rows 1-3), seq 2's 0 (row 5)
  assert.deepEqual([...b.logitsIndices], [4, 6, 1, 2, 3, 5]);
  assert.throws(() => buildForwardBatch([{ tokenIds: [1, 2], startPosition: 4, blockTable: [3, 8], sample: false,
    promptLogitsFrom: 3, promptLogitsTo: 5 }], 4), /prompt logit position 3 outside its chunk \[4, 6\)/);
});

test('uniformGraphBatch: steps of q tokens a row and the same logits rows get a graph batch padded on the null page, keyed by shape', () => {
  const row = (start: number, q: number, k: number): ScheduledSeq => ({ tokenIds: Array.from({ length: q }, (_, i) => 100 + start + i),
    startPosition: start, blockTable: [3, 4, 5], sample: true, ...(k > 0 ? { specTokenIds: new Array<number>(k).fill(7) } : {}) });
  // decode rows: the decode graphs' batch (1-token padding that writes nothing) under the bucket itself
  const decode = uniformGraphBatch([row(5, 1, 0), row(9, 1, 0), row(2, 1, 0)], 16, 64, 8192)!;
  assert.equal(decode.key, 4);
  assert.deepEqual(Array.from(decode.batch.slotMapping), [3 * 16 + 5, 3 * 16 + 9, 3 * 16 + 2, -1]);
  // verify rows of 3 proposals: 4 tokens and 4 logits rows a row; padding rows of 4 tokens on page 0, every position sampled
  const verify = uniformGraphBatch([row(20, 4, 3), row(30, 4, 3), row(40, 4, 3)], 16, 64, 8192)!;
  assert.equal(verify.batch.numSeqs, 4);
  assert.equal(verify.batch.numTokens, 16);
  assert.deepEqual(Array.from(verify.batch.slotMapping.subarray(12)), [0, 1, 2, 3], 'the padding row writes page 0');
  assert.equal(verify.batch.logitsIndices.length, 16);
  // a catch-up of 2 tokens, 1 logits row: another shape, another key (same bucket)
  const catchUp = uniformGraphBatch([row(20, 2, 0), row(30, 2, 0), row(40, 2, 0)], 16, 64, 8192)!;
  assert.equal(catchUp.batch.logitsIndices.length, 4);
  assert.equal(new Set([decode.key, verify.key, catchUp.key]).size, 3);
  // not a graph: rows of other lengths or logits rows, a row past the page, too many tokens, no bucket
  assert.equal(uniformGraphBatch([row(20, 4, 3), row(30, 3, 2)], 16, 64, 8192), null);
  assert.equal(uniformGraphBatch([row(20, 4, 3), row(30, 4, 0)], 16, 64, 8192), null);
  assert.equal(uniformGraphBatch([row(20, 17, 16)], 16, 64, 8192), null);
  assert.equal(uniformGraphBatch([row(20, 4, 3), row(30, 4, 3), row(40, 4, 3)], 16, 64, 15), null);
  assert.equal(uniformGraphBatch(Array.from({ length: 3 }, (_, i) => row(i, 1, 0)), 16, 2, 8192), null);
});
