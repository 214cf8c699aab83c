// Tensor parallelism in the layers (LayerContext.tp): each sublayer's output is summed over the ranks once, before
// its residual add (the last layer's feed-forward output too). Two identical ranks in one thread stand in: each
// holds the row-parallel projections (o_proj, down_proj) at half their value, and the all-reduce doubles a tensor
// (the sum of two equal halves), so the logits must be tp = 1's. A sublayer left unreduced, or reduced twice, is off
// by a factor of 2 in its whole output.

import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { CpuBackend } from '../../src/backend/cpu/cpu-backend.js';
import { asCpu } from '../../src/backend/cpu/tensor.js';
import { buildForwardBatch } from '../../src/engine/batch-builder.js';
import { bytesToF32, f32ToBytes } from '../../src/loader/dtype.js';
import { parseModelConfig } from '../../src/loader/config.js';
import type { WeightSource } from '../../src/loader/types.js';
import { Model } from '../../src/model/model.js';
import { randomWeightSource } from '../../src/model/random-weights.js';
import { testModelShapes } from '../../src/tools/test-model/shapes.js';

const backend = new CpuBackend({ kvCacheBytes: 1 << 22, numThreads: 1 });
after(() => backend.dispose());

/** The source with o_proj and down_proj (dense and expert) halved: one of two equal row-parallel shares. */
function halved(source: WeightSource): WeightSource {
  return {
    ...source,
    names: () => source.names(),
    has: (n) => source.has(n),
    info: (n) => source.info(n),
    read: (n) => {
      const t = source.read(n);
      if (!/(o_proj|down_proj|\.w2)\.weight$/.test(n)) return t;
      const v = bytesToF32(t.dtype, t.data).map((x) => x / 2);
      return { ...t, data: f32ToBytes(t.dtype, v) };
    },
  };
}

for (const shape of ['tiny-qwen3', 'tiny-qwen3-moe']) {
  test(`${shape}: each sublayer's output summed over the ranks once (two equal half-ranks give tp = 1's logits)`, () => {
    const config = { ...parseModelConfig(testModelShapes()[shape], shape), dtype: 'f32' as const };
    const logits = (tp: boolean, reduces: { n: number }) => {
      const source = randomWeightSource(config, { seed: 3 });
      const model = Model.load(config, tp ? halved(source) : source, backend, {
        tensorParallel: tp ? { rank: 0, size: 2, allReduce: (x) => { reduces.n++; asCpu(x).data.forEach((v, i, a) => { a[i] = 2 * v; }); },
          allGather: () => { throw new Error('this config keeps the whole lm_head: nothing to gather'); } } : null,
      });
      backend.allocateKvCache(model.kvCacheSpec(8, 16));
      return model.forward(buildForwardBatch([{ tokenIds: [3, 14, 15, 92, 65], startPosition: 0, blockTable: [1], sample: true }], 16));
    };
    const reduces = { n: 0 };
    const [one, two] = [logits(false, reduces), logits(true, reduces)];
    assert.equal(reduces.n, 2 * config.numLayers, 'an all-reduce after each mixer and each feed-forward');
    const scale = Math.max(...one.map(Math.abs));
    one.forEach((v, i) => assert.ok(Math.abs(v - two[i]!) <= 1e-5 * scale, `logit ${i}: ${two[i]} against ${v}`));
  });
}
