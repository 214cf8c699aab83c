// A step's metadata layout (step-meta.ts): what one step packs into and copies to the device.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { layoutAtLeast, META_BLOCK_TABLE_STRIDE, packStep, stepLayout } from '../../src/backend/cuda/step-meta.js';
import { batchOf } from './helpers.js';

test('stepLayout cuts the capacity layout to the step: a small copy, the same sections, one layout a shape', () => {
  const capacity = layoutAtLeast(null, 8192, 256, 256);  // the engine's reserve for 8,192 tokens, 256 sequences
  const one = batchOf([{ ids: [5], start: 300, pages: Array.from({ length: 19 }, (_, i) => 40 + i) }], 16, [0]);
  const layout = stepLayout(one, capacity);
  assert.equal(layout.blockTableStride, capacity.blockTableStride, 'the stride graphs were captured with');
  assert.ok(layout.totalWords * 4 < 2048 && capacity.totalWords * 4 > 600_000,
    `a one-token step copies ${layout.totalWords * 4} bytes, not the capacity's ${capacity.totalWords * 4}`);
  assert.deepEqual(stepLayout(batchOf([{ ids: [9], start: 7, pages: [1] }], 16, [0]), capacity), layout,
    'the same shape, the same layout (a graph replays its capture\'s offsets)');
  const words = new Int32Array(capacity.totalWords).fill(-7);
  packStep(one, layout, words);
  assert.equal(words[META_BLOCK_TABLE_STRIDE], capacity.blockTableStride);
  assert.deepEqual([...words.subarray(layout.blockTables, layout.blockTables + 19)], [...one.blockTables]);
  assert.equal(words[layout.positions], 300);
  // logits rows beyond the tokens (prompt logprobs) size the token sections too
  const scoring = batchOf([{ ids: [1, 2, 3], start: 0, pages: [0] }], 16, [0, 1, 2]);
  assert.ok(stepLayout(scoring, capacity).capTokens >= 3);
  assert.throws(() => stepLayout(batchOf(Array.from({ length: 300 }, (_, i) => ({ ids: [1], start: 0, pages: [i] })), 16,
    Array.from({ length: 300 }, (_, i) => i)), capacity), /300 sequences over the capacity's 8192 \/ 256/);
});

test('packStep writes each sequence\'s recurrent-state slot, and -1 (no slot) for a batch without them', () => {
  const capacity = layoutAtLeast(null, 256, 64, 64);
  const batch = batchOf([{ ids: [1, 2], start: 0, pages: [0] }, { ids: [3], start: 4, pages: [1] }], 16, [1, 2]);
  const layout = stepLayout(batch, capacity);
  const words = new Int32Array(capacity.totalWords).fill(-7);
  packStep(batch, layout, words);
  assert.deepEqual([...words.subarray(layout.stateSlots, layout.stateSlots + 2)], [-1, -1]);
  packStep({ ...batch, stateSlots: Int32Array.from([5, 0]) }, layout, words);
  assert.deepEqual([...words.subarray(layout.stateSlots, layout.stateSlots + 2)], [5, 0]);
});
