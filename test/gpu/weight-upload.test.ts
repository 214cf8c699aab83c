// Streamed weight upload (pinned staging, fused weights concatenated on the device, and rows cut from a tensor:
// Qwen3.5's q_proj, Qwen3-Next's reordered in_proj) loads exactly what the host path loads.

import { after, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { makeTestModel } from '../../src/tools/make-test-model.js';
import { loadModelDir } from '../../src/loader/model-dir.js';
import type { ModelConfig, WeightSource } from '../../src/loader/types.js';
import { Model } from '../../src/model/model.js';
import { packageRoot } from '../../src/cli/default-model.js';
import { batchOf } from '../backend/helpers.js';
import { newCuda, noCuda } from './cuda-helpers.js';
import type { CudaBackend } from '../../src/backend/cuda/cuda-backend.js';

describe('streamed weight upload', { skip: noCuda }, () => {
  const backends: CudaBackend[] = [];
  after(() => backends.forEach((b) => b.dispose()));

  /** `weights` without readInto: every tensor read whole on the host, as the host path does. */
  const hostOnly = (weights: WeightSource): WeightSource => ({ names: () => weights.names(), has: (n) => weights.has(n),
    info: (n) => weights.info(n), read: (n) => weights.read(n) });

  /** A prompt step's logits of the model loaded from `source` in `chunk`-byte uploads (a state slot if hybrid). */
  const logits = (config: ModelConfig, source: WeightSource, chunk: number) => {
    const cuda = newCuda({ uploadChunkBytes: chunk });
    backends.push(cuda);
    const model = Model.load(config, source, cuda);
    cuda.allocateKvCache(model.kvCacheSpec(8, 16));
    const states = model.recurrentStateLayout(2);
    if (states) cuda.allocateRecurrentState(states);
    const batch = batchOf([{ ids: [3, 17, 40, 99, 5], start: 0, pages: [1] }], 16, [4]);
    if (states) batch.stateSlots = Int32Array.from([1]);
    return model.forward(batch);
  };

  test('logits match the host-read path, with chunks smaller than a tensor', () => {
    const { config, weights } = loadModelDir(join(packageRoot(), 'models', 'quire-demo'));
    assert.equal(config.dtype, 'bf16');
    assert.ok(weights.readInto, 'safetensors sources read in place');
    const run = (source: WeightSource, chunk: number) => logits(config, source, chunk);
    const reference = run(hostOnly(weights), 1 << 20);
    assert.deepEqual(run(weights, 1000), reference, '1000-byte chunks (odd, both buffers in turn)');
    assert.deepEqual(run(weights, 64 << 20), reference);
  });

  // the CUDA-size shapes: the kernels are built for attention heads of 256 and DeltaNet heads of 128
  for (const shape of ['tiny-qwen3.5-moe-128', 'tiny-qwen3-next-128']) {
    test(`${shape}: logits match the host-read path (parts cut by rows, streamed in 1,000-byte chunks)`, async () => {
      const dir = mkdtempSync(join(tmpdir(), 'quire-gpu-upload-'));
      try {
        await makeTestModel({ shape, outDir: dir, dtype: 'bf16', seed: 0 });
        const { config, weights } = loadModelDir(dir);
        assert.deepEqual(logits(config, weights, 1000), logits(config, hostOnly(weights), 1 << 20));
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    });
  }
});
