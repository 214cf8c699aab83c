// Streamed weight upload (pinned staging, fused weights concatenated on the
// device) loads exactly what the host path loads.

import { after, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { loadModelDir } from '../../src/loader/model-dir.js';
import type { WeightSource } from '../../src/loader/types.js';
import { Model } from '../../src/model/model.js';
import { packageRoot } from '../../src/cli/default-model.js';
import { batchOf } from '../backend/helpers.js';
import { newCuda, noCuda } from './cuda-helpers.js';
import type { CudaBackend } from '../../src/backend/cuda/cuda-backend.js';

describe('streamed weight upload', { skip: noCuda }, () => {
  const backends: CudaBackend[] = [];
  after(() => backends.forEach((b) => b.dispose()));

  test('logits match the host-read path, with chunks smaller than a tensor', () => {
    const { config, weights } = loadModelDir(join(packageRoot(), 'models', 'quire-demo'));
    assert.equal(config.dtype, 'bf16');
    assert.ok(weights.readInto, 'safetensors sources read in place');
    const hostOnly: WeightSource = { names: () => weights.names(), has: (n) => weights.has(n),
      info: (n) => weights.info(n), read: (n) => weights.read(n) };
    const run = (source: WeightSource, chunk: number) => {
      const cuda = newCuda({ uploadChunkBytes: chunk });
      backends.push(cuda);
      const model = Model.load(config, source, cuda);
      cuda.allocateKvCache(model.kvCacheSpec(8, 16));
      return model.forward(batchOf([{ ids: [3, 17, 40, 99, 5], start: 0, pages: [1] }], 16, [4]));
    };
    const reference = run(hostOnly, 1 << 20);
    assert.deepEqual(run(weights, 1000), reference, '1000-byte chunks (odd, both buffers in turn)');
    assert.deepEqual(run(weights, 64 << 20), reference);
  });
});
