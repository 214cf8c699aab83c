// The engine worker publishes its gauges while a request is only prefilling (steps that emit no output): the API
// reads the request as running before its first token, not only when outputs arrive.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { engineOptions } from '../../src/engine/options.js';
import { WorkerEngineClient } from '../../src/engine/worker-client.js';
import { makeTestModel } from '../../src/tools/make-test-model.js';
import { defaultSamplingParams } from '../../src/sampling/params.js';

test('a request in chunked prefill shows as running before any output reaches the API', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'quire-gauges-'));
  await makeTestModel({ shape: 'tiny-qwen3', outDir: dir, dtype: 'f32', seed: 5 });
  const engine = await WorkerEngineClient.start(engineOptions({ model: dir, backend: 'cpu', maxModelLen: 2048, maxNumBatchedTokens: 8,
    kvCacheBytes: 32 * 1024 * 1024 }));
  try {
    let numOutputs = 0;
    let sawRunningBeforeOutput = false;
    const done = (async () => {
      for await (const _ of engine.generate({
        requestId: 'long', promptTokenIds: Array.from({ length: 1500 }, (_, i) => 5 + (i % 50)),
        sampling: { ...defaultSamplingParams(), maxTokens: 1, temperature: 0 }, priority: 0, cacheSalt: null, arrivalTime: Date.now(),
      })) numOutputs++;
    })();
    let finished = false;
    void done.then(() => (finished = true));
    while (!finished) {
      if (numOutputs === 0 && engine.stats().numRunning === 1) sawRunningBeforeOutput = true;
      await new Promise((r) => setTimeout(r, 2));
    }
    assert.ok(sawRunningBeforeOutput, 'num_requests_running read 1 during the prefill');
    assert.equal(engine.stats().numRunning, 0);
  } finally {
    await engine.shutdown();
    rmSync(dir, { recursive: true, force: true });
  }
});
