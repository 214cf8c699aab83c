// The scheduler over a KV cache of several groups (a hybrid model): admission
// needs room in every group, rows carry every group's block table, preemption
// frees every group.

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

test('rows carry every group\'s block table; blockTable is group 0\'s; newBlockIds every group\'s new pages', () => {
  const { sched } = makeScheduler({ groups: HYBRID });
  sched.addRequest(makeRequest('a', 6, 3));
  const r1 = step(sched).scheduledRequests[0]!;
  assert.deepEqual([r1.blockTable, r1.blockTables, r1.newBlockIds], [[1, 2], [[1, 2], [3]], [1, 2, 3]]);
  sched.addRequest(makeRequest('b', 2, 1));
  const out = step(sched);
  assert.deepEqual(out.scheduledRequests.map((r) => [r.requestId, r.blockTables, r.newBlockIds]),
    [['a', [[1, 2], [3]], []], ['b', [[4], [5]], [4, 5]]]);

  const two = makeScheduler({ groups: TWO_FULL }).sched;
  two.addRequest(makeRequest('a', 5, 1));
  const r = step(two).scheduledRequests[0]!;
  assert.deepEqual([r.blockTable, r.blockTables, r.newBlockIds], [[1, 2], [[1, 2], [3, 4]], [1, 2, 3, 4]]);
});

test('a request that could never fit counts the pages of every group', () => {
  const { sched } = makeScheduler({ numBlocks: 4, groups: HYBRID });
  assert.throws(() => sched.addRequest(makeRequest('big', 6, 3)),
    /may need 4 KV pages \(3 \+ 1 in its 2 groups\); the cache has 3/);
  sched.addRequest(makeRequest('fits', 5, 3));
  makeScheduler({ numBlocks: 4 }).sched.addRequest(makeRequest('big', 6, 3));  // one group: 3 pages fit
});

test('a waiting request is admitted only when every group has room', () => {
  const { sched, kv } = makeScheduler({ numBlocks: 5, groups: HYBRID });
  sched.addRequest(makeRequest('a', 8, 1));
  sched.addRequest(makeRequest('b', 3, 1));
  // a takes 2 attention pages and its state page; b's attention page would fit the one left, its state would not
  assert.deepEqual(rows(step(sched)), [['a', 8]]);
  assert.deepEqual(rows(step(sched)), [['b', 3]]);
  assert.equal(kv.numFreeBlocks, 4);

  const dense = makeScheduler({ numBlocks: 5 }).sched;
  dense.addRequest(makeRequest('a', 8, 1));
  dense.addRequest(makeRequest('b', 3, 1));
  assert.deepEqual(rows(step(dense)), [['a', 8], ['b', 3]]);
});

test('preemption frees the victim\'s pages in every group', () => {
  const { sched, kv } = makeScheduler({ numBlocks: 6, groups: HYBRID });
  sched.addRequest(makeRequest('a', 4, 6));
  sched.addRequest(makeRequest('b', 4, 6));
  assert.deepEqual(rows(step(sched)), [['a', 4], ['b', 4]]);
  assert.equal(kv.numFreeBlocks, 1);
  // a's decode takes the last page; b's has none, and b (the last running) is preempted
  const out = step(sched);
  assert.deepEqual([rows(out), out.preemptedRequestIds], [[['a', 1]], ['b']]);
  assert.deepEqual(kv.blockTables('b'), [[], []]);
  assert.deepEqual(kv.blockTables('a'), [[1, 5], [2]]);
  assert.equal(kv.numFreeBlocks, 2);
  while (sched.hasUnfinishedRequests()) step(sched);
  assert.equal(kv.numFreeBlocks, 5);
});
