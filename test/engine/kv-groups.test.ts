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
