// Mixtures of experts on CUDA, whole model: logits against the CPU backend (Qwen3-MoE with a dense layer among its
// sparse ones, Mixtral's layout). The MoE test model's transcripts are model.test's (its engines run one at a time).

import { after, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { tinyConfig } from '../../src/model/random-weights.js';
import { assertBf16Close, newCpu, newCuda, noCuda, prefillAndDecode } from './cuda-helpers.js';
import type { Backend } from '../../src/backend/backend.js';
import type { ModelConfig } from '../../src/loader/types.js';

describe('mixture of experts on CUDA', { skip: noCuda }, () => {
  const backends: Backend[] = [];
  after(() => {
    backends.forEach((b) => b.dispose());
  });

  const moe = (numExperts: number, topK: number, sparseLayers: boolean[], renormalize: boolean): ModelConfig['moe'] =>
    ({ numExperts, topK, expertIntermediateSize: 128, renormalize, sharedExpertIntermediateSize: null, sparseLayers });
  for (const [name, arch, route] of [
    ['qwen3_moe, 16 experts top 4, layer 1 dense', 'qwen3', moe(16, 4, [true, false, true], false)],
    ['mixtral, 8 experts top 2', 'llama', moe(8, 2, [true, true, true], true)],
  ] as const) {
    test(`${name}: prefill and decode logits match the CPU backend`, () => {
      const config: ModelConfig = { ...tinyConfig(arch, { hiddenSize: 256, intermediateSize: 512, numLayers: 3, numHeads: 4,
        numKvHeads: 2, headDim: 64, vocabSize: 500 }), architecture: arch === 'qwen3' ? 'qwen3_moe' : 'mixtral', moe: route };
      const run = (backend: Backend) => {
        backends.push(backend);
        return prefillAndDecode(config, backend, 5).out;
      };
      const expected = run(newCpu());
      const actual = run(newCuda());
      // A row whose router had a near-tie may pick another expert on bf16 activations than on the CPU's f32 ones
      // (then its logits differ by that expert's output): at most one of the 8 rows (2 sequences, 4 steps) may.
      const vocab = config.vocabSize;
      const off: string[] = [];
      actual.forEach((logits, i) => {
        for (let r = 0; r < logits.length / vocab; r++) {
          try {
            assertBf16Close(logits.subarray(r * vocab, (r + 1) * vocab), expected[i]!.subarray(r * vocab, (r + 1) * vocab),
              `${name} step ${i} row ${r}`, 0.05);
          } catch (err) {
            off.push((err as Error).message);
          }
        }
      });
      if (off.length > 0) console.log(`# ${off.join('; ')}`);
      assert.ok(off.length <= 1, off.join('; '));
    });
  }

});
