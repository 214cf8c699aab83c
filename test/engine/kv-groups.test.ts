// The engine's KV cache groups come from the layers' declared state: a dense model is one full-attention group of
// every layer, and its pages cost what the dense formula says.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { CpuBackend } from '../../src/backend/cpu/cpu-backend.js';
import { kvCacheGroupsOf } from '../../src/engine/kv-groups.js';
import { bytesPerBlock, bytesPerKvBlock } from '../../src/kv/kv-cache-spec.js';
import { Model } from '../../src/model/model.js';
import { randomWeightSource, tinyConfig } from '../../src/model/random-weights.js';

test('a dense model is one KV cache group of all its layers, its page the dense size', () => {
  const config = tinyConfig('qwen2', { numLayers: 3 });
  const backend = new CpuBackend({ kvCacheBytes: 1 << 20, numThreads: 1 });
  try {
    const groups = kvCacheGroupsOf(Model.load(config, randomWeightSource(config, { seed: 2 }), backend));
    assert.deepEqual(groups, [{ spec: { kind: 'full_attention', numKvHeads: config.numKvHeads, headDim: config.headDim },
      layers: [0, 1, 2] }]);
    assert.equal(bytesPerBlock(groups, 16, 4), bytesPerKvBlock(16, 3, config.numKvHeads, config.headDim, 4));
  } finally {
    backend.dispose();
  }
});

test('a hybrid model: a full-attention group and a recurrent group of its state bytes; the engine refuses it for now', async () => {
  const { parseModelConfig } = await import('../../src/loader/config.js');
  const { testModelShapes } = await import('../../src/tools/test-model/shapes.js');
  const { sizeKvCache } = await import('../../src/engine/backend-factory.js');
  const config = parseModelConfig(testModelShapes()['tiny-qwen3.5'], 'c');
  const backend = new CpuBackend({ kvCacheBytes: 1 << 20, numThreads: 1 });
  try {
    const model = Model.load(config, randomWeightSource(config, { seed: 2 }), backend);
    // conv window 3 rows of 2 * 2 * 16 + 4 * 8 channels, state 4 heads x 16 x 8, f32
    assert.deepEqual(kvCacheGroupsOf(model), [
      { spec: { kind: 'recurrent', stateBytes: 4 * (3 * 96 + 4 * 16 * 8) }, layers: [0, 2] },
      { spec: { kind: 'full_attention', numKvHeads: 2, headDim: 16 }, layers: [1, 3] },
    ]);
    assert.throws(() => sizeKvCache(model, backend, { blockSize: 16, kvCacheBytes: null } as never, 64),
      /hybrid linear-attention models \(Qwen3\.5\) do not run in the engine yet/);
  } finally {
    backend.dispose();
  }
});
