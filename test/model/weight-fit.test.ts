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
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Tensor } from '../../src/backend/backend.js';
import { defaultModelDir } from '../../src/loader/default-model.js';
import { dequantize } from '../../src/loader/gguf-quants.js';
import { loadModel } from '../../src/loader/model-dir.js';
import type { GgufBlocks, WeightSource } from '../../src/loader/types.js';
import { expectedTensors } from '../../src/model/architectures/dense-weights.js';
import { modelDirToGguf } from '../../src/tools/gguf-convert.js';

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

test('a GGUF file\'s projections kept as blocks count their stored bytes, as the loader keeps them (tiny Q4_K_M on the CPU)',
  async () => {
    const root = mkdtempSync(join(tmpdir(), 'quire-fit-gguf-'));
    const cpu = new CpuBackend({ kvCacheBytes: 1 << 20, numThreads: 1, kernel: 'js' });
    try {
      const file = join(root, 'demo-q4_k_m.gguf');
      modelDirToGguf(defaultModelDir(), file, 'q4_k_m');
      const dir = await loadModel(file);
      // uploadGguf keeps the blocks' bytes in the count, and uploads the dequantized values (the CPU computes on those)
      let blockBytes = 0;
      let floatBytes = 0;
      const uploadGguf = (name: string, parts: readonly GgufBlocks[]): Tensor => {
        const K = parts[0]!.shape[1];
        const values = Float32Array.from(parts.flatMap((p) => [...dequantize(p.type, p.data, p.shape[0] * K)]));
        blockBytes += parts.reduce((n, p) => n + p.data.byteLength, 0);
        floatBytes += values.byteLength;
        return backend.upload({ name, dtype: 'f32', shape: [values.length / K, K], data: new Uint8Array(values.buffer) });
      };
      // (its uploads count where the loader's do: on this object, which shadows the CPU backend's count)
      const backend = Object.assign(Object.create(cpu) as Backend, { uploadGguf });
      Model.load(dir.config, dir.weights, backend);
      const kept = deviceWeightBytes(dir.config, 'f32', false, (n) => dir.weights.ggufBlockBytes!(n));
      assert.ok(blockBytes > 0);
      assert.equal(kept, backend.memory().weightBytes - floatBytes + blockBytes);
      assert.equal(deviceWeightBytes(dir.config, 'f32', false), backend.memory().weightBytes, 'without the blocks: floats');
      // a fused projection with a part of no block type is dequantized whole (here: v), so is counted so
      const noV = (n: string) => (n.endsWith('v_proj.weight') ? null : dir.weights.ggufBlockBytes!(n));
      const qk = dir.weights.ggufBlockBytes!('model.layers.0.self_attn.q_proj.weight')! +
        dir.weights.ggufBlockBytes!('model.layers.0.self_attn.k_proj.weight')!;
      const c = dir.config;
      const qkFloats = 4 * (c.numHeads + c.numKvHeads) * c.headDim * c.hiddenSize;
      assert.equal(deviceWeightBytes(c, 'f32', false, noV), kept + c.numLayers * (qkFloats - qk +
        4 * c.numKvHeads * c.headDim * c.hiddenSize - dir.weights.ggufBlockBytes!('model.layers.0.self_attn.v_proj.weight')!));
    } finally {
      cpu.dispose();
      rmSync(root, { recursive: true, force: true });
    }
  });

test('the cuda backend starts a Q4_K_M 8B whose bf16 weights would not fit but whose blocks do', () => {
  const q8b = parseModelConfig(configForShape('qwen3-8b', 'bf16'), 'config.json');
  // Q4_K: 144 bytes a block of 256 weights
  const blocks: WeightSource = { ggufBlockBytes: (name: string) => (/_proj\.weight$/.test(name)
    ? expectedTensors(q8b).find((t) => t.name === name)!.shape.reduce((a, b) => a * b, 1) / 256 * 144 : null) } as never;
  const cuda = { name: 'cuda', computeDType: 'bf16', uploadGguf: () => null,
    memory: () => ({ availableKvBytes: 10e9, totalBytes: 12e9 }) } as unknown as Backend;
  const options = resolveEngineOptions(engineOptions({ model: '/m' }), { backend: 'cuda', name: 'L4', totalBytes: 12e9 });
  assert.match(startupRefusal(q8b, cuda, options) ?? '', /^the model's weights need 16\.\d GB on the device \(bf16\)/);
  assert.equal(startupRefusal(q8b, cuda, options, blocks), null);
  const tight = { ...cuda, memory: () => ({ availableKvBytes: 3e9, totalBytes: 12e9 }) } as unknown as Backend;
  assert.match(startupRefusal(q8b, tight, options, blocks) ?? '',
    /^the model's weights need [4-6]\.\d GB on the device \(GGUF blocks, the rest bf16\)/);
});
