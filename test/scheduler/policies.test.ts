import { test } from 'node:test';
import assert from 'node:assert/strict';
import { makeRequest, makeScheduler, rows, step } from './helpers.js';

test('decode-first (default) runs decode rows beside a new prompt', () => {
  const { sched } = makeScheduler();
  sched.addRequest(makeRequest('a', 4, 5));
  step(sched);
  sched.addRequest(makeRequest('b', 4, 5));
  assert.deepEqual(rows(step(sched)), [['a', 1], ['b', 4]]);
});

test('prefill-first defers decode rows while a prompt waits for its first token', () => {
  const { sched } = makeScheduler({ stepPolicy: 'prefill-first' });
  sched.addRequest(makeRequest('a', 4, 5));
  step(sched);
  sched.addRequest(makeRequest('b', 4, 5));
  assert.deepEqual(rows(step(sched)), [['b', 4]]);
  assert.deepEqual(rows(step(sched)), [['a', 1], ['b', 1]]);
});

test('prefill-first defers at most maxDeferredRowsPerStep rows, the latest streams first', () => {
  const { sched } = makeScheduler({ stepPolicy: 'prefill-first', maxDeferredRowsPerStep: 1 });
  sched.addRequest(makeRequest('a', 4, 5));
  sched.addRequest(makeRequest('b', 4, 5));
  step(sched);
  sched.addRequest(makeRequest('c', 4, 5));
  assert.deepEqual(rows(step(sched)), [['a', 1], ['c', 4]]);
});

test('prefill-first waits for minWaitingPrompts before deferring anything', () => {
  const { sched } = makeScheduler({ stepPolicy: 'prefill-first', minWaitingPrompts: 2 });
  sched.addRequest(makeRequest('a', 4, 5));
  step(sched);
  sched.addRequest(makeRequest('b', 4, 5));
  assert.deepEqual(rows(step(sched)), [['a', 1], ['b', 4]]);
  sched.addRequest(makeRequest('c', 4, 5));
  sched.addRequest(makeRequest('d', 4, 5));
  assert.deepEqual(rows(step(sched)), [['c', 4], ['d', 4]]);
});

test('prefill-first runs the deferred rows when no prompt could be admitted', () => {
  const { sched } = makeScheduler({ stepPolicy: 'prefill-first', numBlocks: 3 });
  sched.addRequest(makeRequest('a', 4, 3));
  step(sched);
  sched.addRequest(makeRequest('b', 5, 1));
  assert.deepEqual(rows(step(sched)), [['a', 1]]);
  assert.equal(sched.numWaiting, 1);
});

test('decode-shape-stable never mixes decode rows and prompt tokens, and alternates while both wait', () => {
  const { sched } = makeScheduler({ stepPolicy: 'decode-shape-stable' });
  sched.addRequest(makeRequest('a', 4, 5));
  assert.deepEqual(rows(step(sched)), [['a', 4]]);
  sched.addRequest(makeRequest('b', 6, 5));
  assert.deepEqual(rows(step(sched)), [['a', 1]]);
  assert.deepEqual(rows(step(sched)), [['b', 6]]);
  assert.deepEqual(rows(step(sched)), [['a', 1], ['b', 1]]);
});

test('decode-shape-stable holds over a busy run and every request finishes', () => {
  const { sched } = makeScheduler({ stepPolicy: 'decode-shape-stable', maxNumBatchedTokens: 8, numBlocks: 12 });
  let numArrived = 0;
  let numMixed = 0;
  let numSteps = 0;
  while (numArrived < 12 || sched.hasUnfinishedRequests()) {
    if (numArrived < 12 && numSteps % 2 === 0) sched.addRequest(makeRequest(`r${numArrived++}`, 3 + (numArrived % 7), 4));
    const out = step(sched);
    const hasDecode = out.scheduledRequests.some((r) => r.isDecode);
    const hasPrompt = out.scheduledRequests.some((r) => !r.isDecode);
    if (hasDecode && hasPrompt) numMixed++;
    assert.ok(++numSteps < 500);
  }
  assert.equal(numMixed, 0);
});

test('decode-shape-stable runs decode rows when a prompt step finds nothing to admit', () => {
  const { sched } = makeScheduler({ stepPolicy: 'decode-shape-stable', numBlocks: 3 });
  sched.addRequest(makeRequest('a', 4, 3));
  step(sched);
  sched.addRequest(makeRequest('b', 5, 1));
  assert.deepEqual(rows(step(sched)), [['a', 1]]);
  assert.deepEqual(rows(step(sched)), [['a', 1]]);
});
