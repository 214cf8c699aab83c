// The token budget per step when none is given follows vLLM's defaults per device and usage context.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { maxModelLenRefusal } from '../../src/engine/engine-core.js';
import { createEngineCore } from '../../src/engine/create-engine.js';
import { tinyConfig } from '../../src/model/random-weights.js';
import { defaultMaxNumBatchedTokens, engineOptions, resolveEngineOptions } from '../../src/engine/options.js';
import { makeTestModel } from '../../src/tools/make-test-model.js';
import { defaultSamplingParams } from '../../src/sampling/params.js';

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

test('--hf-overrides replaces config.json fields: yarn scaling, and the context it derives (as vLLM)', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'quire-hfo-'));
  try {
    await makeTestModel({ shape: 'tiny-qwen3', outDir: dir, dtype: 'f32', seed: 0 });
    const plain = await createEngineCore(engineOptions({ model: dir, backend: 'cpu', cpuThreads: 1 }));
    assert.equal(plain.info.maxModelLen, 4096, 'max_position_embeddings');
    plain.dispose();
    const yarn = { rope_scaling: { rope_type: 'yarn', factor: 4, original_max_position_embeddings: 2048 } };
    const core = await createEngineCore(engineOptions({ model: dir, backend: 'cpu', cpuThreads: 1, hfOverrides: yarn }));
    assert.equal(core.info.maxModelLen, 8192, 'original x factor');
    core.dispose();
    await assert.rejects(createEngineCore(engineOptions({ model: dir, backend: 'cpu', hfOverrides: { rope_scaling: { rope_type: 'dynamic' } } })),
      /config\.json with --hf-overrides: field "rope_scaling\.rope_type" is "dynamic"/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('a sliding window holds the context: the default is the window, a longer --max-model-len is refused naming it', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'quire-swa-'));
  try {
    await makeTestModel({ shape: 'tiny-phi3', outDir: dir, dtype: 'f32', seed: 0 });
    const core = await createEngineCore(engineOptions({ model: dir, backend: 'cpu', cpuThreads: 1 }));
    assert.equal(core.info.maxModelLen, 2047, 'sliding_window, under max_position_embeddings 4096');
    core.dispose();
    await assert.rejects(createEngineCore(engineOptions({ model: dir, backend: 'cpu', maxModelLen: 4096 })),
      /max_model_len \(4096\) is longer than the model's sliding window \(2047 tokens\).*--max-model-len 2047 or less/);
    const windowed = await createEngineCore(engineOptions({ model: dir, backend: 'cpu', cpuThreads: 1, maxModelLen: 1024 }));
    assert.equal(windowed.info.maxModelLen, 1024);
    windowed.dispose();
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('a --max-model-len past the model\'s context is refused as vLLM refuses it, unless QUIRE_ALLOW_LONG_MAX_MODEL_LEN', async () => {
  const config = tinyConfig('qwen3', { maxPositionEmbeddings: 4096 });
  const options = { enableChunkedPrefill: true, maxNumBatchedTokens: 2048 };
  assert.equal(maxModelLenRefusal(config, 4096, options, false), null);
  assert.match(maxModelLenRefusal(config, 8192, options, false) ?? '',
    /max_model_len \(8192\) is longer than the model's context \(4096: .*QUIRE_ALLOW_LONG_MAX_MODEL_LEN=1/);
  assert.equal(maxModelLenRefusal(config, 8192, options, true), null);
  const yarn = tinyConfig('qwen3', { maxPositionEmbeddings: 4096, ropeScaling: { type: 'yarn', factor: 4,
    originalMaxPositionEmbeddings: 4096, betaFast: 32, betaSlow: 1, attentionFactor: 1.14, truncate: true } });
  assert.equal(maxModelLenRefusal(yarn, 16384, options, false), null, 'yarn stretches the context');
  const dir = mkdtempSync(join(tmpdir(), 'quire-long-'));
  try {
    await makeTestModel({ shape: 'tiny-qwen3', outDir: dir, dtype: 'f32', seed: 0 });
    await assert.rejects(createEngineCore(engineOptions({ model: dir, backend: 'cpu', maxModelLen: 8192 })),
      /max_model_len \(8192\) is longer than the model's context \(4096/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('chunked prefill off: a budget under max_model_len is refused at start-up; with room, a prompt runs in one step', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'quire-nochunk-'));
  try {
    await makeTestModel({ shape: 'tiny-qwen3', outDir: dir, dtype: 'f32', seed: 0 });
    await assert.rejects(createEngineCore(engineOptions({ model: dir, backend: 'cpu', maxModelLen: 256, maxNumBatchedTokens: 64,
      enableChunkedPrefill: false })), /max_num_batched_tokens \(64\) is smaller than max_model_len \(256\)/);
    for (const [chunked, steps] of [[true, 4], [false, 1]] as const) {
      const core = await createEngineCore(engineOptions({ model: dir, backend: 'cpu', maxModelLen: 256, maxNumBatchedTokens: 256,
        enableChunkedPrefill: chunked, longPrefillTokenThreshold: chunked ? 50 : 0 }));
      try {
        core.addRequest({ requestId: 'r', promptTokenIds: Array.from({ length: 190 }, (_, i) => 3 + (i % 50)),
          sampling: defaultSamplingParams({ maxTokens: 1 }),
          arrivalTime: 0, priority: 0, cacheSalt: null });
        while (core.hasWork()) core.step();
        assert.equal(core.stats().numSteps, steps, chunked ? '190 prompt tokens at 50 a step' : 'the prompt in one step');
      } finally {
        core.dispose();
      }
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
