// A request the KV cache can never hold is refused on its own: the engine does not fail, and serves the next one
// (it used to throw in the scheduler and take the engine down with every later request).

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { engineOptions } from '../../src/engine/options.js';
import { WorkerEngineClient } from '../../src/engine/worker-client.js';
import type { EngineOutput } from '../../src/engine/types.js';
import { makeTestModel } from '../../src/tools/make-test-model.js';
import { defaultSamplingParams } from '../../src/sampling/params.js';

async function run(engine: WorkerEngineClient, id: string, numPromptTokens: number, maxTokens: number): Promise<EngineOutput> {
  let last: EngineOutput | null = null;
  for await (const o of engine.generate({
    requestId: id, promptTokenIds: Array.from({ length: numPromptTokens }, (_, i) => 5 + (i % 50)),
    sampling: { ...defaultSamplingParams(), maxTokens, temperature: 0 }, priority: 0, cacheSalt: null, arrivalTime: Date.now(),
  })) last = o;
  return last!;
}

test('a request larger than the whole KV cache is an error of its own, and the engine serves on', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'quire-kv-'));
  await makeTestModel({ shape: 'tiny-qwen3', outDir: dir, dtype: 'f32', seed: 3 });
  const engine = await WorkerEngineClient.start(engineOptions({ model: dir, backend: 'cpu', maxModelLen: 512, kvCacheBytes: 96 * 1024 }));
  try {
    const capacity = (engine.info.numBlocks - 1) * engine.info.blockSize;
    assert.ok(capacity < 500, `the cache holds ${capacity} tokens`);
    const refused = await run(engine, 'big', 10, capacity);
    assert.equal(refused.finishReason, 'error');
    assert.match(refused.error ?? '', /may need \d+ KV pages; the cache has \d+/);
    assert.equal(engine.error, null, 'the engine did not fail');
    const served = await run(engine, 'small', 4, 3);
    assert.equal(served.finishReason, 'length');
  } finally {
    await engine.shutdown();
    rmSync(dir, { recursive: true, force: true });
  }
});
