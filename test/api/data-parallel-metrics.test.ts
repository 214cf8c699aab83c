// /metrics of a data-parallel engine: each engine gauge and counter also has one series per replica, labelled
// engine="i" as vLLM labels them, beside the unlabelled total that one engine has always had.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ApiMetrics } from '../../src/api/metrics.js';
import type { EngineClient } from '../../src/engine/client.js';
import { emptyStats, sumStats } from '../../src/engine/stats.js';
import type { EngineStats } from '../../src/engine/types.js';
import { metricValue } from './helpers/start.js';

function engineOf(replicas: EngineStats[] | null, one: EngineStats = emptyStats()): EngineClient {
  return {
    generate: () => { throw new Error('not here'); }, abort: () => {}, shutdown: async () => {},
    stats: () => (replicas ? sumStats(replicas) : one),
    ...(replicas ? { replicaStats: () => replicas } : {}),
  };
}

test('per-replica series labelled engine="i", and the unlabelled totals', async () => {
  const replicas = [
    { ...emptyStats(), numRunning: 1, numWaiting: 4, numTotalBlocks: 11, kvCacheUsage: 0.5, prefixCacheHits: 5, prefixCacheQueries: 9 },
    { ...emptyStats(), numRunning: 2, numWaiting: 0, numTotalBlocks: 11, kvCacheUsage: 0.1, prefixCacheHits: 7, prefixCacheQueries: 20, numPreemptions: 3 },
  ];
  const metrics = new ApiMetrics(engineOf(replicas), 'both', 'm');
  let m = await metrics.text();
  assert.equal(metricValue(m, 'quire:num_requests_running'), 3);
  assert.equal(metricValue(m, 'quire:num_requests_running{engine="0"}'), 1);
  assert.equal(metricValue(m, 'quire:num_requests_running{engine="1"}'), 2);
  assert.equal(metricValue(m, 'quire:num_requests_waiting{engine="0"}'), 4);
  assert.equal(metricValue(m, 'quire:kv_cache_usage_perc{engine="1"}'), 0.1);
  assert.ok(Math.abs(metricValue(m, 'quire:kv_cache_usage_perc') - 0.3) < 1e-12);
  assert.equal(metricValue(m, 'quire:prefix_cache_hits_total'), 12);
  assert.equal(metricValue(m, 'quire:prefix_cache_hits_total{engine="0"}'), 5);
  assert.equal(metricValue(m, 'quire:prefix_cache_queries_total{engine="1"}'), 20);
  assert.equal(metricValue(m, 'quire:num_preemptions_total{engine="0"}'), 0);
  assert.equal(metricValue(m, 'quire:num_preemptions_total{engine="1"}'), 3);
  assert.equal(metricValue(m, 'vllm:num_requests_running{model_name="m",engine="1"}'), 2, 'under vLLM\'s names too');
  replicas[1]!.prefixCacheHits = 10;
  m = await metrics.text();
  assert.equal(metricValue(m, 'quire:prefix_cache_hits_total{engine="1"}'), 10, 'counters follow each replica');
  assert.equal(metricValue(m, 'quire:prefix_cache_hits_total'), 15);
});

test('one engine: no engine label, the series as they always were', async () => {
  const m = await new ApiMetrics(engineOf(null, { ...emptyStats(), numRunning: 2, prefixCacheHits: 4 }), 'quire').text();
  assert.equal(metricValue(m, 'quire:num_requests_running'), 2);
  assert.equal(metricValue(m, 'quire:prefix_cache_hits_total'), 4);
  assert.equal(metricValue(m, 'quire:num_preemptions_total'), 0);
  assert.doesNotMatch(m, /engine=/);
});
