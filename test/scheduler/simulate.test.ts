import { test } from 'node:test';
import assert from 'node:assert/strict';
import { simulateW4, simulateW5, W5_DEFAULT } from '../../src/scheduler/simulate.js';

test('W4 with pages to spare: no preemption, each prompt computed once, one decode token per later output', () => {
  const o = { numBlocks: 1000, blockSize: 4, promptTokens: 32, outputTokens: 16, numRequests: 16,
    maxNumBatchedTokens: 64, maxNumSeqs: 64 };
  const r = simulateW4(o);
  assert.equal(r.numPreemptions, 0);
  assert.equal(r.numPromptTokensComputed, o.numRequests * o.promptTokens);
  assert.equal(r.numDecodeTokens, o.numRequests * (o.outputTokens - 1));
  assert.equal(r.maxRunning, o.numRequests);
});

test('W4 under memory pressure: paging runs more sequences than full reservation, at the cost of preemptions', () => {
  const o = { numBlocks: 65, blockSize: 4, promptTokens: 32, outputTokens: 16, numRequests: 16,
    maxNumBatchedTokens: 64, maxNumSeqs: 64 };
  const r = simulateW4(o);
  assert.equal(r.maxRunningFullReservation, Math.floor(64 / 12));
  assert.ok(r.maxRunning > r.maxRunningFullReservation, `${r.maxRunning} running at most`);
  assert.equal(r.concurrencyRatio, r.maxRunning / r.maxRunningFullReservation);
  assert.ok(r.numPreemptions > 0);
  assert.ok(r.numPromptTokensComputed > o.numRequests * o.promptTokens, 'preempted work is recomputed');
});

test('W5: with prefix caching the shared system prompt is computed once', () => {
  const o = { ...W5_DEFAULT, numRequests: 12, sharedPrefixTokens: 64, suffixTokens: 10, outputTokens: 4,
    concurrency: 4, numBlocks: 200, blockSize: 16, maxNumBatchedTokens: 64 };
  const r = simulateW5(o);
  const promptLen = o.sharedPrefixTokens + o.suffixTokens;
  assert.equal(r.cachingOff.numPromptTokensComputed, o.numRequests * promptLen);
  assert.equal(r.cachingOn.numPromptTokensComputed, promptLen + (o.numRequests - 1) * o.suffixTokens);
  assert.equal(r.cachingOn.prefixCacheHitTokens, (o.numRequests - 1) * o.sharedPrefixTokens);
  assert.equal(r.cachingOff.prefixCacheHitTokens, 0);
  assert.equal(r.promptComputeRatio, r.cachingOn.numPromptTokensComputed / r.cachingOff.numPromptTokensComputed);
});
