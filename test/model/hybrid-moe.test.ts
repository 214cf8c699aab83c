// The hybrid mixtures of experts on the CPU backend (Qwen3.5-MoE, Qwen3-Next): the layers each family builds, and one
// sequence's logits the same however its tokens are split into steps and whatever shares them (the shared expert's
// op and layer against their formulas: shared-expert.test.ts).

import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { CpuBackend } from '../../src/backend/cpu/cpu-backend.js';
import { buildForwardBatch, type ScheduledSeq } from '../../src/engine/batch-builder.js';
import { parseModelConfig } from '../../src/loader/config.js';
import { DenseMlp } from '../../src/model/layers/mlp.js';
import { SparseMoe } from '../../src/model/layers/moe.js';
import { Model } from '../../src/model/model.js';
import { randomWeightSource } from '../../src/model/random-weights.js';
import { testModelShapes } from '../../src/tools/test-model/shapes.js';
import { assertBatchedAsAlone } from './helpers.js';

const BLOCK = 16;
const backend = new CpuBackend({ kvCacheBytes: 1 << 23, numThreads: 1 });
after(() => backend.dispose());

for (const shape of ['tiny-qwen3.5-moe', 'tiny-qwen3-next']) {
  const config = { ...parseModelConfig(testModelShapes()[shape], 'c'), dtype: 'f32' as const };
  const model = Model.load(config, randomWeightSource(config, { seed: 7 }), backend);
  const step = (seqs: (ScheduledSeq & { slot: number })[], allRows = false): Float32Array => {
    const batch = buildForwardBatch(seqs, BLOCK);
    batch.stateSlots = Int32Array.from(seqs, (s) => s.slot);
    if (allRows) batch.logitsIndices = Int32Array.from({ length: batch.numTokens }, (_, i) => i);
    return model.forward(batch);
  };
  const prompt = [5, 17, 300, 42, 9, 77, 128, 3, 250, 11];

  test(`${shape}: DeltaNet and gated attention as layer_types says, each with its MLP (experts and a shared expert)`, () => {
    assert.deepEqual(model.layerStateSpecs().map((s) => s?.kind), ['recurrent', 'full_attention', 'recurrent', 'full_attention']);
    const ffns = model.parts.layers.map((l) => l.ffn);
    // Qwen3-Next's layer 2 is in mlp_only_layers: a dense MLP of intermediate_size
    const dense = shape === 'tiny-qwen3-next' ? [2] : [];
    ffns.forEach((f, l) => {
      if (dense.includes(l)) return assert.ok(f instanceof DenseMlp, `layer ${l} dense`);
      assert.ok(f instanceof SparseMoe && f.shared !== null, `layer ${l} sparse with a shared expert`);
      assert.deepEqual([f.experts.numExperts, f.experts.intermediate, f.route.topK, f.route.renormalize, f.shared.gateUp.shape],
        [8, shape === 'tiny-qwen3.5-moe' ? 24 : 32, 3, shape === 'tiny-qwen3.5-moe', [96, 64]]);
    });
  });

  test(`${shape}: a prompt in one step, in chunks and token by token gives the same logits; batched, each its own bits`, () => {
    backend.allocateKvCache(model.kvCacheSpec(32, BLOCK));
    backend.allocateRecurrentState(model.recurrentStateLayout(4)!);
    const vocab = config.vocabSize;
    const whole = step([{ tokenIds: prompt, startPosition: 0, blockTable: [1], sample: false, slot: 0 }], true);
    for (const split of [[4, 3, 3], [1, 1, 1, 1, 1, 1, 1, 1, 1, 1], [7, 1, 2]]) {
      let at = 0;
      for (const n of split) {
        const logits = step([{ tokenIds: prompt.slice(at, at + n), startPosition: at, blockTable: [2], sample: false, slot: 1 }], true);
        for (let i = 0; i < n; i++) {
          for (let j = 0; j < vocab; j++) {
            const [a, b] = [logits[i * vocab + j]!, whole[(at + i) * vocab + j]!];
            assert.ok(Math.abs(a - b) < 1e-4, `split ${split}: position ${at + i}, logit ${j}: ${a} vs ${b}`);
          }
        }
        at += n;
      }
    }
    assertBatchedAsAlone(step, prompt);
  });
}
