import { test } from 'node:test';
import assert from 'node:assert/strict';
import { histogram } from '../../src/scheduler/trace.js';
import { makeRequest, makeScheduler, step } from './helpers.js';

test('histogram buckets are 0, 1, 2-3, 4-7, ... with an open last bucket', () => {
  assert.deepEqual(histogram([0, 1, 2, 3, 4, 9, 0]), { bounds: [0, 1, 2, 4, 8], counts: [2, 1, 2, 1, 1] });
  assert.deepEqual(histogram([]), { bounds: [0], counts: [0] });
});

test('the admission trace counts each step and agrees with the scheduler outputs', () => {
  const { sched } = makeScheduler({ trace: true, maxNumBatchedTokens: 6, numBlocks: 5 });
  sched.addRequest(makeRequest('a', 8, 3));
  sched.addRequest(makeRequest('b', 4, 6));
  const outs = [];
  while (sched.hasUnfinishedRequests()) outs.push(step(sched));
  const s = sched.traceSummary()!;
  const decodeRows = outs.flatMap((o) => o.scheduledRequests.filter((r) => r.isDecode));
  const promptRows = outs.flatMap((o) => o.scheduledRequests.filter((r) => !r.isDecode));
  assert.equal(s.numSteps, outs.length);
  assert.equal(s.numDecodeTokens, decodeRows.length);
  assert.equal(s.numPromptTokens, promptRows.reduce((a, r) => a + r.numScheduledTokens, 0));
  assert.equal(s.numStartedPrompts, promptRows.filter((r) => r.isNewlyAdmitted).length);
  assert.equal(s.numContinuedPrompts, promptRows.filter((r) => !r.isNewlyAdmitted).length);
  assert.equal(s.numPreemptions, sched.numPreemptions);
  assert.ok(s.numPreemptions > 0);
  assert.equal(s.numDecodeOnlySteps,
    outs.filter((o) => o.scheduledRequests.length > 0 && o.scheduledRequests.every((r) => r.isDecode)).length);
  assert.equal(s.promptTokensPerStep.counts.reduce((a, c) => a + c, 0), outs.length);
  // first step: a gets 6 of its 8 prompt tokens, b waits.
  assert.equal(s.waitingPromptsPerStep.counts[2], 1);
  const text = sched.formatTraceSummary();
  assert.match(text, new RegExp(`steps ${outs.length} \\(decode-only ${s.numDecodeOnlySteps}\\)`));
  assert.match(text, /prompt tokens per step:/);
  assert.match(text, new RegExp(`preemptions ${s.numPreemptions}`));
});

test('the trace is off by default', () => {
  const { sched } = makeScheduler();
  sched.addRequest(makeRequest('a', 2, 1));
  step(sched);
  assert.equal(sched.traceSummary(), null);
  assert.equal(sched.formatTraceSummary(), 'scheduler trace is off');
});
