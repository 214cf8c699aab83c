// The scheduler over a KV cache of several groups (a hybrid model): admission
// needs room in every group (pages and state slots), rows carry every group's
// block table and the state slot, preemption frees every group.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { KVCacheGroup } from '../../src/kv/kv-cache-spec.js';
import { makeRequest, makeScheduler, rows, step } from './helpers.js';

const HYBRID: KVCacheGroup[] = [
  { spec: { kind: 'full_attention', numKvHeads: 2, headDim: 64 }, layers: [3] },
  { spec: { kind: 'recurrent', stateBytes: 4096 }, layers: [0, 1, 2] },
];
const TWO_FULL: KVCacheGroup[] = [
  { spec: { kind: 'full_attention', numKvHeads: 8, headDim: 128 }, layers: [0] },
  { spec: { kind: 'full_attention', numKvHeads: 2, headDim: 64 }, layers: [1] },
];

test('rows carry every group\'s block table and the state slot; blockTable is group 0\'s; newBlockIds every group\'s ' +
  'new pages', () => {
  const { sched } = makeScheduler({ groups: HYBRID, numStateSlots: 2 });
  sched.addRequest(makeRequest('a', 6, 3));
  const r1 = step(sched).scheduledRequests[0]!;
  assert.deepEqual([r1.blockTable, r1.blockTables, r1.newBlockIds, r1.stateSlot], [[1, 2], [[1, 2], [0]], [1, 2], 0]);
  sched.addRequest(makeRequest('b', 2, 1));
  const out = step(sched);
  assert.deepEqual(out.scheduledRequests.map((r) => [r.requestId, r.blockTables, r.newBlockIds, r.stateSlot]),
    [['a', [[1, 2], [0]], [], 0], ['b', [[3], [1]], [3], 1]]);

  const two = makeScheduler({ groups: TWO_FULL }).sched;
  two.addRequest(makeRequest('a', 5, 1));
  const r = step(two).scheduledRequests[0]!;
  assert.deepEqual([r.blockTable, r.blockTables, r.newBlockIds, 'stateSlot' in r], [[1, 2], [[1, 2], [3, 4]], [1, 2, 3, 4], false]);
});

test('a request that could never fit counts the pages of every paged group (a state slot is no page)', () => {
  const { sched } = makeScheduler({ numBlocks: 4, groups: TWO_FULL });
  assert.throws(() => sched.addRequest(makeRequest('big', 6, 3)),
    /may need 6 KV pages \(3 \+ 3 in its 2 groups\); the cache has 3/);
  makeScheduler({ numBlocks: 4 }).sched.addRequest(makeRequest('big', 6, 3));  // one group: 3 pages fit
  makeScheduler({ numBlocks: 4, groups: HYBRID, numStateSlots: 1 }).sched.addRequest(makeRequest('big', 6, 3));
});

test('a waiting request is admitted only when every group has room: a free state slot too', () => {
  const { sched, kv } = makeScheduler({ numBlocks: 9, groups: HYBRID, numStateSlots: 1 });
  sched.addRequest(makeRequest('a', 8, 2));
  sched.addRequest(makeRequest('b', 3, 1));
  // pages for both, but one state slot: b waits for a to finish
  assert.deepEqual(rows(step(sched)), [['a', 8]]);
  assert.deepEqual(kv.numFreeStateSlots, 0);
  assert.deepEqual(rows(step(sched)), [['a', 1]]);
  assert.deepEqual(rows(step(sched)), [['b', 3]]);
  assert.deepEqual([kv.numFreeBlocks, kv.numFreeStateSlots], [8, 1]);

  const dense = makeScheduler({ numBlocks: 5 }).sched;
  dense.addRequest(makeRequest('a', 8, 1));
  dense.addRequest(makeRequest('b', 3, 1));
  assert.deepEqual(rows(step(dense)), [['a', 8], ['b', 3]]);
});

test('preemption frees the victim\'s pages in every group and its state slot; it resumes on a fresh slot', () => {
  const { sched, kv } = makeScheduler({ numBlocks: 4, groups: HYBRID, numStateSlots: 2 });
  sched.addRequest(makeRequest('a', 4, 6));
  sched.addRequest(makeRequest('b', 4, 6));
  assert.deepEqual(rows(step(sched)), [['a', 4], ['b', 4]]);
  assert.deepEqual([kv.numFreeBlocks, kv.numFreeStateSlots], [1, 0]);
  // a's decode takes the last page; b's has none, and b (the last running) is preempted
  const out = step(sched);
  assert.deepEqual([rows(out), out.preemptedRequestIds], [[['a', 1]], ['b']]);
  assert.deepEqual(kv.blockTables('b'), [[], []]);
  assert.deepEqual(kv.blockTables('a'), [[1, 3], [0]]);
  assert.deepEqual([kv.numFreeBlocks, kv.numFreeStateSlots], [1, 1]);
  for (let n = 0; sched.hasUnfinishedRequests(); n++) {
    const resumed = step(sched).scheduledRequests.find((r) => r.requestId === 'b' && r.isNewlyAdmitted);
    // b recomputes from position 0 (its state from zeros) on whichever slot is free
    if (resumed) assert.deepEqual([resumed.startPosition, resumed.stateSlot! >= 0], [0, true]);
    assert.ok(n < 50);
  }
  assert.deepEqual([kv.numFreeBlocks, kv.numFreeStateSlots], [3, 2]);
});
