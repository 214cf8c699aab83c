// The model hands a GEMM and the norm after it to Backend.matmulAddRmsNorm where the backend has it: o with the
// layer's post-attention norm, and down with the next layer's input norm (the last layer's down goes to the final
// norm as before); a mixture of experts goes to Backend.moeExpertsAddRmsNorm with the next layer's input norm alike.

import { after, test } from 'node:test';
import assert from 'node:assert/strict';
import { CpuBackend } from '../../src/backend/cpu/cpu-backend.js';
import type { MoeExperts, MoeRoute, Tensor } from '../../src/backend/backend.js';
import { parseModelConfig } from '../../src/loader/config.js';
import { configForShape } from '../../src/tools/test-model/shapes.js';
import { Model } from '../../src/model/model.js';
import { randomWeightSource, tinyConfig } from '../../src/model/random-weights.js';
import { chunked, runSteps } from './helpers.js';

/** A CPU backend with matmulAddRmsNorm as the two ops it stands for, recording each call's label and norm weight. */
class RecordingBackend extends CpuBackend {
  readonly calls: { label: string; norm: Tensor }[] = [];
  matmulAddRmsNorm(x: Tensor, w: Tensor, label: string, bias: Tensor | null, residual: Tensor, normW: Tensor,
    eps: number): Tensor {
    this.calls.push({ label, norm: normW });
    return this.addRmsNorm(this.matmul(x, w, label, bias), residual, normW, eps);
  }
}

const backends: CpuBackend[] = [];
after(() => backends.forEach((b) => b.dispose()));

test('o and down reach matmulAddRmsNorm with the norms after them; the logits are the unfused ops\'', () => {
  const config = tinyConfig('qwen3', { numLayers: 3 });
  const plain = new CpuBackend({ kvCacheBytes: 1 << 24, numThreads: 1 });
  const recording = new RecordingBackend({ kvCacheBytes: 1 << 24, numThreads: 1 });
  backends.push(plain, recording);
  const load = (b: CpuBackend) => Model.load(config, randomWeightSource(config, { seed: 3 }), b);
  const fused = load(recording);
  const prompts = { a: Array.from({ length: 20 }, (_, i) => (i * 7 + 1) % config.vocabSize) };
  const steps = chunked('a', 20, 16);
  const expected = runSteps(load(plain), prompts, steps, 1).get('a')!;
  assert.deepEqual(runSteps(fused, prompts, steps, 1).get('a')!, expected);
  const layers = fused.parts.layers;
  const perStep = [...layers.flatMap((lw, l) => [{ label: 'o', norm: lw.postMixerNorm },
    ...(l + 1 < layers.length ? [{ label: 'down', norm: layers[l + 1]!.inputNorm }] : [])])];
  assert.equal(recording.calls.length, perStep.length * steps.length);
  recording.calls.forEach((call, i) => {
    const want = perStep[i % perStep.length]!;
    assert.equal(call.label, want.label, `call ${i}`);
    assert.equal(call.norm, want.norm, `call ${i}: the norm weight`);
  });
});

/** A CPU backend with moeExpertsAddRmsNorm as the two ops it stands for, recording each call's norm weight. */
class MoeRecordingBackend extends CpuBackend {
  readonly norms: Tensor[] = [];
  moeExpertsAddRmsNorm(x: Tensor, router: Tensor, experts: MoeExperts, route: MoeRoute, residual: Tensor, normW: Tensor,
    eps: number): Tensor {
    this.norms.push(normW);
    return this.addRmsNorm(this.moeExperts(x, router, experts, route), residual, normW, eps);
  }
}

test('a mixture of experts reaches moeExpertsAddRmsNorm with the next layer\'s input norm; the logits are the unfused ops\'', () => {
  const config = parseModelConfig(configForShape('tiny-qwen3-moe', 'f32'), 'config.json');
  const plain = new CpuBackend({ kvCacheBytes: 1 << 24, numThreads: 1 });
  const recording = new MoeRecordingBackend({ kvCacheBytes: 1 << 24, numThreads: 1 });
  backends.push(plain, recording);
  const load = (b: CpuBackend) => Model.load(config, randomWeightSource(config, { seed: 4 }), b);
  const fused = load(recording);
  const prompts = { a: Array.from({ length: 20 }, (_, i) => (i * 5 + 2) % config.vocabSize) };
  const steps = chunked('a', 20, 16);
  assert.deepEqual(runSteps(fused, prompts, steps, 1).get('a')!, runSteps(load(plain), prompts, steps, 1).get('a')!);
  const layers = fused.parts.layers;
  // every sparse layer but the last (whose output goes to the final norm)
  const perStep = layers.flatMap((lw, l) => (config.moe!.sparseLayers[l] && l + 1 < layers.length ? [layers[l + 1]!.inputNorm] : []));
  assert.ok(perStep.length > 0, 'the model has a sparse layer before its last');
  assert.equal(recording.norms.length, perStep.length * steps.length);
  recording.norms.forEach((norm, i) => assert.equal(norm, perStep[i % perStep.length], `call ${i}: the norm weight`));
});
