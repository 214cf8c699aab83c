import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { CpuBackend } from '../../src/backend/cpu/cpu-backend.js';
import { buildForwardBatch } from '../../src/engine/batch-builder.js';
import { Model } from '../../src/model/model.js';
import { randomWeightSource, tinyConfig } from '../../src/model/random-weights.js';

const backend = new CpuBackend({ kvCacheBytes: 1 << 22, numThreads: 1 });
after(() => backend.dispose());

test('padding rows of a fixed-shape decode batch leave the real rows\' logits bit-identical', () => {
  const config = tinyConfig('qwen3');
  const model = Model.load(config, randomWeightSource(config, { seed: 2 }), backend);
  const blockSize = 4;
  const run = (padToNumSeqs: number): Float32Array => {
    backend.allocateKvCache(model.kvCacheSpec(16, blockSize));
    model.forward(buildForwardBatch([
      { tokenIds: [3, 1, 4, 1, 5], startPosition: 0, blockTable: [9, 2], sample: false },
      { tokenIds: [2, 7], startPosition: 0, blockTable: [5], sample: false },
    ], blockSize));
    return model.forward(buildForwardBatch([
      { tokenIds: [9], startPosition: 5, blockTable: [9, 2], sample: true },
      { tokenIds: [6], startPosition: 2, blockTable: [5], sample: true },
    ], blockSize, padToNumSeqs));
  };
  const unpadded = run(2);
  assert.equal(unpadded.length, 2 * config.vocabSize);
  assert.deepEqual(run(8), unpadded);
});
