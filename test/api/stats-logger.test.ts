// The periodic stats line: rates over the interval, the hit rate of the interval's lookups, quiet when idle.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { StatsLogger } from '../../src/api/stats-logger.js';
import { emptyStats } from '../../src/engine/stats.js';

test('logs the interval\'s throughput, queue, KV usage and prefix hit rate; says nothing while idle', () => {
  const s = emptyStats();
  let now = 0;
  const lines: string[] = [];
  const logger = new StatsLogger({ stats: () => ({ ...s }) }, (l) => lines.push(l), () => now);
  assert.equal(logger.tick(), null);
  now += 10_000;
  assert.equal(logger.tick(), null, 'idle: nothing running, waiting or computed');
  Object.assign(s, { numPromptTokens: 5_000, numGenerationTokens: 1_234, numRunning: 3, numWaiting: 2, kvCacheUsage: 0.256,
    prefixCacheQueries: 4_000, prefixCacheHits: 1_000 });
  now += 10_000;
  assert.equal(logger.tick(), 'Avg prompt throughput: 500.0 tokens/s, Avg generation throughput: 123.4 tokens/s, '
    + 'Running: 3 reqs, Waiting: 2 reqs, KV cache usage: 25.6%, Prefix cache hit rate: 25.0%');
  Object.assign(s, { numGenerationTokens: 1_334, prefixCacheQueries: 5_000, prefixCacheHits: 2_000 });
  now += 5_000;
  assert.match(logger.tick()!, /Avg prompt throughput: 0\.0 tokens\/s, Avg generation throughput: 20\.0 tokens\/s, .*Prefix cache hit rate: 100\.0%/);
  Object.assign(s, { numRunning: 0, numWaiting: 0 });
  now += 10_000;
  assert.equal(logger.tick(), null);
  assert.equal(lines.length, 2);
});

test('with speculative decoding, vLLM\'s SpecDecoding line follows: acceptance length, throughputs, per-position rates', () => {
  const s = { ...emptyStats(), specDecoding: { numDrafts: 0, numDraftTokens: 0, numAcceptedTokens: 0, numAcceptedTokensPerPos: [0, 0] } };
  let now = 0;
  const lines: string[] = [];
  const logger = new StatsLogger({ stats: () => structuredClone(s) }, (l) => lines.push(l), () => now);
  logger.tick();
  Object.assign(s, { numGenerationTokens: 300, numRunning: 1 });
  s.specDecoding = { numDrafts: 100, numDraftTokens: 200, numAcceptedTokens: 150, numAcceptedTokensPerPos: [90, 60] };
  now += 10_000;
  logger.tick();
  assert.equal(lines[1], 'SpecDecoding metrics: Mean acceptance length: 2.50, Accepted throughput: 15.00 tokens/s, '
    + 'Drafted throughput: 20.00 tokens/s, Accepted: 150 tokens, Drafted: 200 tokens, Per-position acceptance rate: '
    + '0.900, 0.600, Avg Draft acceptance rate: 75.0%');
  s.numGenerationTokens = 400;
  now += 10_000;
  logger.tick();
  assert.equal(lines.length, 3, 'no proposal in the interval: no SpecDecoding line');
});
