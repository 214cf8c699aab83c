// The model registry: every architecture config.json may name has a builder, and a model is its builder's layers.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ARCHITECTURES } from '../../src/loader/config.js';
import { ARCHITECTURE_BUILDERS, architectureBuilder } from '../../src/model/registry.js';
import { buildDecoder } from '../../src/model/architectures/dense.js';
import { buildQwen35 } from '../../src/model/architectures/qwen3_5.js';
import { Model } from '../../src/model/model.js';
import { CpuBackend } from '../../src/backend/cpu/cpu-backend.js';
import { randomWeightSource, tinyConfig } from '../../src/model/random-weights.js';

test('every family the config loader accepts has exactly one builder, and no builder is unreachable', () => {
  assert.deepEqual(new Set(Object.values(ARCHITECTURES)), new Set(Object.keys(ARCHITECTURE_BUILDERS)));
  for (const family of Object.values(ARCHITECTURES)) {
    const builder = ['qwen3_5', 'qwen3_5_moe', 'qwen3_next'].includes(family) ? buildQwen35 : buildDecoder;
    assert.equal(architectureBuilder({ ...tinyConfig('qwen3'), architecture: family }), builder, family);
  }
  assert.throws(() => architectureBuilder({ ...tinyConfig('qwen3'), architecture: 'mamba' as never }), /no model builder for architecture mamba/);
});

test('a dense model is its layers: attention and a dense MLP each, one KV cache shape', () => {
  const config = tinyConfig('llama', { numLayers: 3 });
  const backend = new CpuBackend({ kvCacheBytes: 1 << 20, numThreads: 1 });
  try {
    const model = Model.load(config, randomWeightSource(config, { seed: 1 }), backend);
    assert.equal(model.parts.layers.length, 3);
    assert.deepEqual(model.layerStateSpecs(), Array(3).fill({ kind: 'full_attention', numKvHeads: config.numKvHeads, headDim: config.headDim }));
    assert.deepEqual(model.kvCacheSpec(7, 16), { numBlocks: 7, blockSize: 16, numLayers: 3, numKvHeads: config.numKvHeads, headDim: config.headDim });
  } finally {
    backend.dispose();
  }
});
