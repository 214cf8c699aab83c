// The start-up check that the weights fit the device: their bytes there, and the refusal naming the numbers and
// what to change (block FP8 offered where the model can load so, mixtures of experts included).

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { CpuBackend } from '../../src/backend/cpu/cpu-backend.js';
import { parseModelConfig } from '../../src/loader/config.js';
import { Model } from '../../src/model/model.js';
import { randomWeightSource } from '../../src/model/random-weights.js';
import { deviceWeightBytes, weightFitRefusal } from '../../src/model/weight-fit.js';
import type { Backend } from '../../src/backend/backend.js';
import { startupRefusal } from '../../src/engine/backend-factory.js';
import { engineOptions, resolveEngineOptions } from '../../src/engine/options.js';
import { configForShape } from '../../src/tools/test-model/shapes.js';

const moe30b = parseModelConfig(configForShape('qwen3-30b-a3b', 'bf16'), 'config.json');

test('deviceWeightBytes is what a backend holds after loading (tiny MoE, f32 on the CPU)', () => {
  const config = parseModelConfig(configForShape('tiny-qwen3-moe', 'f32'), 'config.json');
  const backend = new CpuBackend({ kvCacheBytes: 1 << 20, numThreads: 1, kernel: 'js' });
  try {
    Model.load(config, randomWeightSource(config), backend);
    assert.equal(deviceWeightBytes(config, 'f32', false), backend.memory().weightBytes);
  } finally {
    backend.dispose();
  }
});

test('deviceWeightBytes of the hybrid families (DeltaNet layers, experts and shared experts) is what the CPU holds after loading', () => {
  for (const shape of ['tiny-qwen3.5', 'tiny-qwen3.5-moe', 'tiny-qwen3-next']) {
    const config = parseModelConfig(configForShape(shape, 'f32'), 'config.json');
    const backend = new CpuBackend({ kvCacheBytes: 1 << 20, numThreads: 1, kernel: 'js' });
    try {
      Model.load(config, randomWeightSource(config), backend);
      assert.equal(deviceWeightBytes(config, 'f32', false), backend.memory().weightBytes, shape);
    } finally {
      backend.dispose();
    }
  }
});

test('Qwen3-30B-A3B: ~61 GB of bf16, ~31 GB with its projections in block FP8', () => {
  const bf16 = deviceWeightBytes(moe30b, 'bf16', false);
  assert.ok(bf16 > 60.5e9 && bf16 < 61.5e9, `${bf16}`);
  const fp8 = deviceWeightBytes(moe30b, 'bf16', true);
  assert.ok(fp8 > 30.5e9 && fp8 < 32e9, `${fp8}`);
});

test('weights that do not fit are refused with the numbers and the flags to change; weights that fit are not', () => {
  const h100 = { totalBytes: 85e9, gpuMemoryUtilization: 0.9 };
  assert.equal(weightFitRefusal(moe30b, 'bf16', false, { ...h100, budgetBytes: 74e9 }), null);
  const refusal = weightFitRefusal(moe30b, 'bf16', false, { totalBytes: 48e9, gpuMemoryUtilization: 0.9, budgetBytes: 41e9 });
  assert.match(refusal ?? '', /^the model's weights need 61\.\d GB on the device \(bf16\), more than the 41\.0 GB that --gpu-memory-utilization 0\.9 leaves of this GPU's 48\.0 GB after activations; use --quantization fp8 \(block FP8 weights: 3\d\.\d GB\), or a higher --gpu-memory-utilization \(now 0\.9\), or a GPU with more memory$/);
  // a backend that cannot run the model in FP8 does not offer it
  assert.match(weightFitRefusal(moe30b, 'bf16', false, { totalBytes: 48e9, gpuMemoryUtilization: 0.9, budgetBytes: 41e9 }, false) ?? '',
    /after activations; use a higher --gpu-memory-utilization \(now 0\.9\), or a GPU with more memory$/);
  const tiny = weightFitRefusal(moe30b, 'bf16', true, { totalBytes: 24e9, gpuMemoryUtilization: 0.95, budgetBytes: 22e9 });
  assert.match(tiny ?? '', /need 3\d\.\d GB on the device \(block FP8\).*; use a GPU with more memory$/);
});

test('the cuda backend starts an FP8 mixture of experts, and offers --quantization fp8 to one that does not fit in bf16', () => {
  const cuda = (budgetBytes: number, totalBytes: number) =>
    ({ name: 'cuda', computeDType: 'bf16', memory: () => ({ availableKvBytes: budgetBytes, totalBytes }) }) as unknown as Backend;
  const options = (quantization: 'fp8' | null) => resolveEngineOptions(engineOptions({ model: '/m', quantization }),
    { backend: 'cuda', name: 'H100', totalBytes: 85e9 });
  assert.equal(startupRefusal(moe30b, cuda(74e9, 85e9), options('fp8')), null);
  const fp8 = parseModelConfig(configForShape('qwen3-30b-a3b', 'bf16', 'fp8'), 'config.json');
  assert.equal(startupRefusal(fp8, cuda(40e9, 48e9), options(null)), null);
  assert.match(startupRefusal(moe30b, cuda(41e9, 48e9), options(null)) ?? '',
    /^the model's weights need 61\.\d GB on the device \(bf16\).*; use --quantization fp8 \(block FP8 weights: 3\d\.\d GB\), or/);
  // the hybrid families refuse --quantization fp8 at load (architectures/qwen3_5.ts): not offered them
  const hybrid = parseModelConfig(configForShape('tiny-qwen3-next-128', 'bf16'), 'config.json');
  assert.match(startupRefusal(hybrid, cuda(1e3, 48e9), options(null)) ?? '', /after activations; use a higher --gpu-memory-utilization/);
});
