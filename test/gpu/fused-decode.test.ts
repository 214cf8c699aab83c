// The batch-invariant mode's fused one-token decode step (kernels/decode_layers.cu, experimental, opt-in) against
// the same mode layer by layer: the same logits bit for bit, across shapes (qk-norm or not, G = 1, 2, 4, head dims 64 and 128, norm
// rows of one and of several chunks per thread) and kv lengths of one split and of many (rows over 2048
// positions split every ~256, so the attention stage's splits publish and merge).

import { after, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { Model } from '../../src/model/model.js';
import { randomWeightSource, tinyConfig } from '../../src/model/random-weights.js';
import type { ModelConfig } from '../../src/loader/types.js';
import type { CudaBackend } from '../../src/backend/cuda/cuda-backend.js';
import { batchOf } from '../backend/helpers.js';
import { newCuda, noCuda } from './cuda-helpers.js';

const BLOCK = 16;

interface Case {
  name: string;
  family: 'qwen3' | 'llama';
  config: Partial<ModelConfig>;
  promptLen: number;
}

const CASES: Case[] = [
  { name: 'qwen3 hidden 256, D 64, G 2', family: 'qwen3', promptLen: 40,
    config: { hiddenSize: 256, intermediateSize: 1024, numLayers: 3, numHeads: 4, numKvHeads: 2, headDim: 64, vocabSize: 500 } },
  { name: 'qwen3 hidden 1024, D 128, G 2, 2100 positions', family: 'qwen3', promptLen: 2100,
    config: { hiddenSize: 1024, intermediateSize: 3072, numLayers: 2, numHeads: 16, numKvHeads: 8, headDim: 128,
      vocabSize: 1000, maxPositionEmbeddings: 4096 } },
  { name: 'llama hidden 2048, D 128, G 4', family: 'llama', promptLen: 300,
    config: { hiddenSize: 2048, intermediateSize: 1536, numLayers: 2, numHeads: 16, numKvHeads: 4, headDim: 128,
      vocabSize: 700, maxPositionEmbeddings: 4096 } },
  { name: 'qwen3 hidden 512, D 64, G 1', family: 'qwen3', promptLen: 20,
    config: { hiddenSize: 512, intermediateSize: 512, numLayers: 2, numHeads: 8, numKvHeads: 8, headDim: 64, vocabSize: 300 } },
];

describe('fused one-token decode (batch-invariant mode)', { skip: noCuda }, () => {
  const backends: CudaBackend[] = [];
  after(() => backends.forEach((b) => b.dispose()));

  /** Logits of a prefill then `steps` one-token decode steps (in a CUDA graph with `graphed`), as raw bits. */
  function run(c: Case, fusedDecode: boolean, steps: number, graphed = false): { bits: Uint32Array[]; backend: CudaBackend } {
    const config = tinyConfig(c.family, c.config);
    const backend = newCuda({ batchInvariant: true, fusedDecode });
    backends.push(backend);
    const model = Model.load(config, randomWeightSource(config, { seed: 31 }), backend);
    const numPages = Math.ceil((c.promptLen + steps) / BLOCK);
    backend.allocateKvCache(model.kvCacheSpec(numPages + 8, BLOCK));
    const pages = Array.from({ length: numPages }, (_, i) => numPages + 7 - i);  // distinct, out of order
    const ids = Array.from({ length: c.promptLen }, (_, i) => (i * 37 + 11) % config.vocabSize);
    const bits: Uint32Array[] = [];
    const keep = (logits: Float32Array) => bits.push(new Uint32Array(logits.buffer.slice(0)));
    keep(model.forward(batchOf([{ ids, start: 0, pages }], BLOCK, [c.promptLen - 1])));
    for (let s = 0; s < steps; s++) {
      const batch = batchOf([{ ids: [(s * 13 + 7) % config.vocabSize], start: c.promptLen + s, pages }], BLOCK, [0]);
      keep(graphed ? backend.graph(1, batch, () => model.forward(batch)) as Float32Array : model.forward(batch));
    }
    return { bits, backend };
  }

  test('captured in a CUDA graph and replayed: the same bits', () => {
    const c = { ...CASES[1]!, promptLen: 300 };
    const steps = 4;
    const ref = run(c, false, steps);
    const fused = run(c, true, steps, true);
    assert.equal(fused.backend.numGraphCaptures, 1);
    assert.equal(fused.backend.numGraphReplays, steps - 1);
    assert.ok(fused.backend.numFusedSteps >= 1, 'the captured step fused');
    fused.bits.forEach((b, i) => {
      const at = b.findIndex((v, j) => v !== ref.bits[i]![j]);
      assert.equal(at, -1, `step ${i}: logit ${at} differs`);
    });
  });

  for (const c of CASES) {
    test(`${c.name}: the layer-by-layer bits`, () => {
      const steps = 3;
      const ref = run(c, false, steps);
      const fused = run(c, true, steps);
      assert.equal(ref.backend.numFusedSteps, 0);
      assert.equal(fused.backend.numFusedSteps, steps, 'every one-token step fused');
      fused.bits.forEach((b, i) => {
        const at = b.findIndex((v, j) => v !== ref.bits[i]![j]);
        assert.equal(at, -1, `step ${i}: logit ${at} differs`);
      });
    });
  }
});
