import { test } from 'node:test';
import assert from 'node:assert/strict';
import { benchCpu } from '../../src/model/bench-cpu.js';
import { randomWeightSource, tinyConfig } from '../../src/model/random-weights.js';

test('benchCpu times prefill and decode of a tiny model and reports rates consistent with the times', () => {
  const config = tinyConfig('llama', { numLayers: 1 });
  const r = benchCpu({ config, weights: randomWeightSource(config), numThreads: 1, promptLen: 20, numDecodeSteps: 3, batchSize: 2 });
  assert.equal(r.numThreads, 1);
  for (const v of [r.prefillMs, r.decodeMsPerStep, r.prefillGflopsPerS, r.decodeGflopsPerS]) assert.ok(Number.isFinite(v) && v > 0);
  assert.ok(Math.abs(r.prefillTokensPerS - 40 / (r.prefillMs / 1000)) < 1e-6 * r.prefillTokensPerS);
  assert.ok(Math.abs(r.decodeTokensPerS - 2 / (r.decodeMsPerStep / 1000)) < 1e-6 * r.decodeTokensPerS);
});
