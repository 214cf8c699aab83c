// Prefix caching on a hybrid model in the scheduler and KV manager: a recurrent state can only be saved where a
// step ends, so prompt chunks are cut at page ends; a state saved by a step is hit from the next step on; a hit is
// the longest run of attention pages whose last page has a saved state; saved states are an LRU pool.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { BlockHash } from '../../src/kv/block-pool.js';
import type { KVCacheGroup } from '../../src/kv/kv-cache-spec.js';
import { CachedStatePool } from '../../src/kv/state-cache.js';
import { makeRequest, makeScheduler, step } from './helpers.js';

const HYBRID: KVCacheGroup[] = [
  { spec: { kind: 'full_attention', numKvHeads: 2, headDim: 64 }, layers: [3] },
  { spec: { kind: 'recurrent', stateBytes: 4096 }, layers: [0, 1, 2] },
];
const tokens = (n: number, from = 0) => Array.from({ length: n }, (_, i) => 100 + from + i);
const setup = { groups: HYBRID, enablePrefixCaching: true, numStateSlots: 2, maxNumSeqs: 2 };

test('hybrid prefix cache: a prompt chunk crossing a page end is cut at its last one and the step saves the state ' +
  'there; without a state cache nothing is cut or saved', () => {
  const { sched } = makeScheduler({ ...setup, numCachedStateSlots: 2 });
  sched.addRequest(makeRequest('a', 10, 2, { tokens: tokens(10) }));
  const r1 = step(sched).scheduledRequests[0]!;
  assert.deepEqual([r1.numScheduledTokens, r1.saveStateTo, r1.restoreStateFrom], [8, 2, undefined], 'cut at 8, saved in slot 2');
  const r2 = step(sched).scheduledRequests[0]!;
  assert.deepEqual([r2.numScheduledTokens, r2.saveStateTo], [2, undefined], 'the tail: no page end');
  const r3 = step(sched).scheduledRequests[0]!;
  assert.deepEqual([r3.isDecode, r3.seqLen, r3.saveStateTo], [true, 11, undefined], 'decode never saves');

  const off = makeScheduler({ ...setup }).sched;
  off.addRequest(makeRequest('a', 10, 2, { tokens: tokens(10) }));
  const r = step(off).scheduledRequests[0]!;
  assert.deepEqual([r.numScheduledTokens, r.saveStateTo], [10, undefined]);
});

test('hybrid prefix cache: a state saved by a step is hit from the next step on (restored, fewer tokens), never in ' +
  'the same step; the hit is cut back to the last page with a saved state', () => {
  const { sched, kv } = makeScheduler({ ...setup, numStateSlots: 3, maxNumSeqs: 3, numCachedStateSlots: 2,
    maxNumBatchedTokens: 20 });
  sched.addRequest(makeRequest('a', 10, 1, { tokens: tokens(10) }));
  sched.addRequest(makeRequest('same-step', 10, 1, { tokens: tokens(10) }));
  let out = step(sched);
  assert.deepEqual(out.scheduledRequests.map((r) => [r.requestId, r.numComputedTokensBefore, r.numScheduledTokens,
    r.restoreStateFrom]), [['a', 0, 8, undefined], ['same-step', 0, 8, undefined]], 'its state was not saved yet');
  assert.equal(out.scheduledRequests[0]!.saveStateTo, 3);
  assert.equal(out.scheduledRequests[1]!.saveStateTo, undefined, 'saved already by a');
  // 13 tokens sharing a's first 8 (2 pages): pages hit up to 8, the state at 8 restored
  sched.addRequest(makeRequest('b', 13, 1, { tokens: [...tokens(8), ...tokens(5, 50)] }));
  out = step(sched);
  const b = out.scheduledRequests.find((r) => r.requestId === 'b')!;
  assert.deepEqual([b.numComputedTokensBefore, b.numScheduledTokens, b.restoreStateFrom, b.numCachedTokens, b.saveStateTo],
    [8, 4, 3, 8, 4], 'from 8, cut at 12, saved in the second cached slot');
  assert.equal(kv.prefixCacheHits, 8);
  while (sched.hasUnfinishedRequests()) step(sched);
  // 11 tokens sharing a's first 8 only: the state at 8 restored (and touched)
  sched.addRequest(makeRequest('c', 11, 1, { tokens: [...tokens(8), ...tokens(3, 70)] }));
  const c = step(sched).scheduledRequests[0]!;
  assert.deepEqual([c.numComputedTokensBefore, c.restoreStateFrom], [8, 3]);
  while (sched.hasUnfinishedRequests()) step(sched);
  sched.addRequest(makeRequest('d', 9, 1, { tokens: tokens(9, 500) }));
  assert.equal(step(sched).scheduledRequests[0]!.saveStateTo, 4, 'evicts the least recently used state (b\'s at 12)');
  while (sched.hasUnfinishedRequests()) step(sched);
  // 14 tokens sharing b's first 13: pages hit up to 12, but the state at 12 is gone: from 8
  sched.addRequest(makeRequest('e', 14, 1, { tokens: [...tokens(8), ...tokens(6, 50)] }));
  const e = step(sched).scheduledRequests[0]!;
  assert.deepEqual([e.numComputedTokensBefore, e.restoreStateFrom], [8, 3], 'cut back to the page with a state');
});

test('cached-state pool: least recently used evicted first, a hit touches, a saved hash is not saved twice, reset ' +
  'frees all', () => {
  const pool = new CachedStatePool(4, 2);
  const h = (s: string) => s as BlockHash;
  assert.deepEqual([pool.reserve(h('a')), pool.reserve(h('b')), pool.reserve(h('a'))], [4, 5, null]);
  pool.touch(h('a'));
  assert.equal(pool.reserve(h('c')), 5, 'b was the least recently used');
  assert.deepEqual([pool.peek(h('a')), pool.peek(h('b')), pool.peek(h('c')), pool.numCached], [4, -1, 5, 2]);
  pool.reset();
  assert.deepEqual([pool.peek(h('a')), pool.numCached], [-1, 0]);
  assert.equal(new CachedStatePool(0, 0).reserve(h('a')), null, 'no slot at all');
});

test('speculative decoding on a hybrid model: a verify row backs its state up; a rejected proposal rewinds the request '
  + 'to the row\'s start and restores the backup next step, whose row takes new proposals after the tokens it computes again', () => {
  const { sched } = makeScheduler({ groups: HYBRID, numStateSlots: 2, maxNumSeqs: 2, specBackupSlots: true });
  sched.addRequest(makeRequest('a', 6, 20, { tokens: tokens(6) }));
  step(sched);  // the prompt and the first token
  const req = sched.getRequest('a')!;
  req.specTokenIds = [1, 2, 3];
  const verify = sched.schedule().scheduledRequests[0]!;
  assert.deepEqual([verify.numComputedTokensBefore, verify.tokenIds.length, verify.stateSlot, verify.backupStateTo],
    [6, 4, 0, 2], 'backup of slot 0 after the 2 state slots');
  // the first proposal kept, the second rejected: the target's token 9 after it
  sched.updateFromOutput(new Map([['a', [1, 9]]]));
  assert.deepEqual([req.numComputedTokens, req.pendingStateRestore, req.numTokens], [6, 2, 9]);
  assert.equal(req.isDecoding, false);
  req.specTokenIds = [4, 5];
  const again = sched.schedule().scheduledRequests[0]!;
  assert.deepEqual([again.restoreStateFrom, again.numComputedTokensBefore, again.specTokenIds, again.backupStateTo],
    [2, 6, [4, 5], 2], 'the backup restored, the accepted tokens computed again, proposals after them, backed up anew');
  assert.deepEqual(again.tokenIds, [42, 1, 9, 4, 5], 'the first token (7 x 6), the kept proposal, the target\'s, the new proposals');
  assert.equal(req.pendingStateRestore, -1);
  // every proposal kept: the state is the step's own, nothing restored
  sched.updateFromOutput(new Map([['a', [4, 5, 8]]]));
  assert.deepEqual([req.numComputedTokens, req.pendingStateRestore, req.isDecoding], [11, -1, true]);
});

test('speculative decoding on a hybrid model, rejected twice in a row: the accepted tokens\' pages stay (one registered '
  + 'in the prefix cache by the second row), and the third row computes them again without proposals, moving the state on', () => {
  const { sched, kv } = makeScheduler({ groups: HYBRID, enablePrefixCaching: true, numStateSlots: 2, maxNumSeqs: 2, specBackupSlots: true });
  sched.addRequest(makeRequest('a', 8, 30, { tokens: tokens(8) }));
  step(sched);  // the prompt and the first token: 9 known, 8 computed
  const req = sched.getRequest('a')!;
  req.specTokenIds = [1, 2, 3];
  sched.schedule();
  // two proposals kept, the third rejected: 12 known, back to 8 (the row's start)
  sched.updateFromOutput(new Map([['a', [1, 2, 99]]]));
  assert.deepEqual([req.numComputedTokens, req.numTokens, req.numRollbacksInARow, req.mayTakeProposals], [8, 12, 1, true]);
  req.specTokenIds = [4, 5];
  const again = sched.schedule().scheduledRequests[0]!;
  assert.deepEqual(again.tokenIds.slice(1), [1, 2, 99, 4, 5], 'the tokens after 8 computed again, new proposals after them');
  const pages = kv.blockTable('a').slice(0, 3);
  // positions 8 .. 11 are all known now: their page is registered when the row takes it; both proposals rejected
  sched.updateFromOutput(new Map([['a', [77]]]));
  assert.deepEqual([req.numComputedTokens, req.numTokens, req.numRollbacksInARow, req.mayTakeProposals], [8, 13, 2, false]);
  assert.deepEqual(kv.blockTable('a'), pages, 'the pages of the 12 tokens it keeps stay (the last, of 12 .. 13, goes)');
  req.specTokenIds = [6];
  const third = sched.schedule().scheduledRequests[0]!;
  assert.deepEqual([third.numComputedTokensBefore, third.tokenIds.slice(1), third.specTokenIds, third.backupStateTo],
    [8, [1, 2, 99, 77], [], undefined], 'no proposals: nothing to back up, the state moves on');
  sched.updateFromOutput(new Map([['a', [80]]]));
  assert.deepEqual([req.numComputedTokens, req.numRollbacksInARow, req.isDecoding, req.mayTakeProposals], [13, 0, true, true]);
});
