// The token budget per step when none is given follows vLLM's defaults per device and usage context.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createEngineCore } from '../../src/engine/engine-core.js';
import { defaultMaxNumBatchedTokens, engineOptions, resolveEngineOptions } from '../../src/engine/options.js';
import { makeTestModel } from '../../src/tools/make-test-model.js';

const GIB = 2 ** 30;

test('vLLM defaults: 16384 / 8192 on GPUs of 70 GiB and more (A100 aside), 8192 / 2048 below, 2048 on the CPU', () => {
  const cases: [string, 'cpu' | 'cuda', number, number, number][] = [
    ['NVIDIA H100 80GB HBM3', 'cuda', 79.2 * GIB, 16384, 8192],
    ['NVIDIA H200', 'cuda', 139.8 * GIB, 16384, 8192],
    ['NVIDIA A100-SXM4-80GB', 'cuda', 79.2 * GIB, 8192, 2048],
    ['NVIDIA L4', 'cuda', 22 * GIB, 8192, 2048],
    ['AMD EPYC', 'cpu', 512 * GIB, 2048, 2048],
  ];
  for (const [name, backend, totalBytes, offline, server] of cases) {
    assert.equal(defaultMaxNumBatchedTokens('llm-class', { backend, name, totalBytes }), offline, `${name} offline`);
    assert.equal(defaultMaxNumBatchedTokens('api-server', { backend, name, totalBytes }), server, `${name} server`);
  }
  const h100 = { backend: 'cuda' as const, name: 'NVIDIA H100 80GB HBM3', totalBytes: 80 * GIB };
  assert.equal(resolveEngineOptions(engineOptions({ model: '/m', maxNumBatchedTokens: 512 }), h100).maxNumBatchedTokens, 512);
  assert.equal(resolveEngineOptions(engineOptions({ model: '/m' }), h100).maxNumBatchedTokens, 16384);
});

test('the engine reports the budget in effect', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'quire-opts-'));
  try {
    await makeTestModel({ shape: 'tiny-llama', outDir: dir, dtype: 'f32', seed: 0 });
    for (const [given, expected] of [[null, 2048], [96, 96]] as const) {
      const core = await createEngineCore(engineOptions({ model: dir, backend: 'cpu', cpuThreads: 1, maxNumBatchedTokens: given }));
      assert.equal(core.info.maxNumBatchedTokens, expected);
      assert.equal(core.info.maxNumSeqs, 256);
      core.dispose();
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
