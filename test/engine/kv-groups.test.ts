// The engine's KV cache groups come from the layers' declared state: a dense model is one full-attention group of
// every layer, and its pages cost what the dense formula says; a hybrid model adds a recurrent group whose state
// slots the sizing takes out of the budget first.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { CpuBackend } from '../../src/backend/cpu/cpu-backend.js';
import { kvCacheGroupsOf } from '../../src/engine/kv-groups.js';
import { bytesPerBlock, bytesPerKvBlock } from '../../src/kv/kv-cache-spec.js';
import { Model } from '../../src/model/model.js';
import { randomWeightSource, tinyConfig } from '../../src/model/random-weights.js';

test('a dense model is one KV cache group of all its layers, its page the dense size', () => {
  const config = tinyConfig('qwen2', { numLayers: 3 });
  const backend = new CpuBackend({ kvCacheBytes: 1 << 20, numThreads: 1 });
  try {
    const groups = kvCacheGroupsOf(Model.load(config, randomWeightSource(config, { seed: 2 }), backend));
    assert.deepEqual(groups, [{ spec: { kind: 'full_attention', numKvHeads: config.numKvHeads, headDim: config.headDim },
      layers: [0, 1, 2] }]);
    assert.equal(bytesPerBlock(groups, 16, 4), bytesPerKvBlock(16, 3, config.numKvHeads, config.headDim, 4));
  } finally {
    backend.dispose();
  }
});

test('a hybrid model: a full-attention group and a recurrent group of its state bytes; the engine sizes both on ' +
  'the CPU', async () => {
  const { parseModelConfig } = await import('../../src/loader/config.js');
  const { testModelShapes } = await import('../../src/tools/test-model/shapes.js');
  const { sizeKvCache } = await import('../../src/engine/backend-factory.js');
  const config = parseModelConfig(testModelShapes()['tiny-qwen3.5'], 'c');
  const backend = new CpuBackend({ kvCacheBytes: 1 << 20, numThreads: 1 });
  try {
    const model = Model.load(config, randomWeightSource(config, { seed: 2 }), backend);
    // conv window 3 rows of 2 * 2 * 16 + 4 * 8 channels, state 4 heads x 16 x 8, f32
    const stateBytes = 4 * (3 * 96 + 4 * 16 * 8);
    assert.deepEqual(kvCacheGroupsOf(model), [
      { spec: { kind: 'recurrent', stateBytes }, layers: [0, 2] },
      { spec: { kind: 'full_attention', numKvHeads: 2, headDim: 16 }, layers: [1, 3] },
    ]);
    const plan = sizeKvCache(model, backend, { blockSize: 16, kvCacheBytes: null, maxNumSeqs: 8 } as never, 64);
    const pageBytes = 2 * 16 * 2 * 16 * 4 * 2;
    assert.deepEqual(plan, { numBlocks: Math.floor(((1 << 20) - 8 * 2 * stateBytes) / pageBytes), bytesPerBlock: pageBytes,
      numStateSlots: 8, bytesPerStateSlot: 2 * stateBytes, numCachedStateSlots: 0, numSpecBackupSlots: 0 });
    // the backend holds both against its budget
    assert.equal(backend.memory().availableKvBytes, (1 << 20) - 8 * 2 * stateBytes - plan.numBlocks * pageBytes);
  } finally {
    backend.dispose();
  }
});

test('bf16 delta-rule states (Backend.ssmBytesPerElement 2) halve the state part of a slot, not the conv window; the '
  + 'engine\'s option reaches the backend', async () => {
  const { parseModelConfig } = await import('../../src/loader/config.js');
  const { testModelShapes } = await import('../../src/tools/test-model/shapes.js');
  const { kvCacheGroupsOfSpecs } = await import('../../src/engine/kv-groups.js');
  const { createBackend } = await import('../../src/engine/backend-factory.js');
  const { engineOptions } = await import('../../src/engine/options.js');
  const { recurrentStateBytes } = await import('../../src/model/layers/types.js');
  const config = parseModelConfig(testModelShapes()['tiny-qwen3.5'], 'c');
  const backend = new CpuBackend({ kvCacheBytes: 1 << 20, numThreads: 1 });
  try {
    const specs = Model.load(config, randomWeightSource(config, { seed: 2 }), backend).layerStateSpecs();
    const groups = kvCacheGroupsOfSpecs(specs, 2);
    const stateBytes = 4 * 3 * 96 + 2 * 4 * 16 * 8;  // f32 windows, bf16 states
    assert.deepEqual(groups[0], { spec: { kind: 'recurrent', stateBytes }, layers: [0, 2] });
    const shape = { numKeyHeads: 16, numValueHeads: 48, keyDim: 128, valueDim: 128, convKernel: 4 };  // qwen3.5-27b's
    assert.equal(recurrentStateBytes(shape, 4) - recurrentStateBytes(shape, 2), 2 * 48 * 128 * 128);
  } finally {
    backend.dispose();
  }
  for (const dtype of ['f32', 'bf16'] as const) {
    const { backend: b } = await createBackend(engineOptions({ model: '/m', backend: 'cpu', cpuThreads: 1,
      mambaSsmCacheDtype: dtype }));
    try {
      assert.equal(b.ssmCacheDtype, dtype);
    } finally {
      b.dispose();
    }
  }
});

test('sizing: state slots (one a sequence, maxNumSeqs) come out of the budget before the pages; too many is a clear ' +
  'error; a dense model has none', async () => {
  const { planKvCache } = await import('../../src/engine/backend-factory.js');
  const groups = [{ spec: { kind: 'recurrent', stateBytes: 1000 }, layers: [0, 2, 3] },
    { spec: { kind: 'full_attention', numKvHeads: 2, headDim: 8 }, layers: [1] }] as const;
  const page = 2 * 4 * 2 * 8 * 2;  // 256 bytes
  const o = { blockSize: 4, kvBytesPerElement: 2, maxNumSeqs: 4 };
  assert.deepEqual(planKvCache(groups, { ...o, budgetBytes: 4 * 3000 + 10 * page + 100 }),
    { numBlocks: 10, bytesPerBlock: page, numStateSlots: 4, bytesPerStateSlot: 3000, numCachedStateSlots: 0, numSpecBackupSlots: 0 });
  // prefix caching: as many slots again for saved states (or cachedStateSlots), before the pages too
  assert.deepEqual(planKvCache(groups, { ...o, enablePrefixCaching: true, budgetBytes: 8 * 3000 + 10 * page + 100 }),
    { numBlocks: 10, bytesPerBlock: page, numStateSlots: 4, bytesPerStateSlot: 3000, numCachedStateSlots: 4, numSpecBackupSlots: 0 });
  assert.equal(planKvCache(groups, { ...o, enablePrefixCaching: true, cachedStateSlots: 1, budgetBytes: 5 * 3000 + 10 * page })
    .numCachedStateSlots, 1);
  assert.throws(() => planKvCache(groups, { ...o, enablePrefixCaching: true, budgetBytes: 4 * 3000 + 10 * page }),
    /after 8 recurrent state slots .*twice with prefix caching/);
  assert.throws(() => planKvCache(groups, { ...o, budgetBytes: 4 * 3000 + page }),
    /budget \(12256 bytes\) holds no page of 256 bytes after 4 recurrent state slots of 3000 bytes \(12000 bytes.*--max-num-seqs/);
  assert.deepEqual(planKvCache(denseGroupsOf(), { ...o, budgetBytes: 10 * page }),
    { numBlocks: 10, bytesPerBlock: page, numStateSlots: 0, bytesPerStateSlot: 0, numCachedStateSlots: 0, numSpecBackupSlots: 0 });
  assert.equal(planKvCache(denseGroupsOf(), { ...o, enablePrefixCaching: true, budgetBytes: 10 * page }).numCachedStateSlots, 0);
  // speculative decoding: a backup a running sequence's state, before the pages too; a dense model has none
  assert.deepEqual(planKvCache(groups, { ...o, specBackupSlots: true, budgetBytes: 8 * 3000 + 10 * page + 100 }),
    { numBlocks: 10, bytesPerBlock: page, numStateSlots: 4, bytesPerStateSlot: 3000, numCachedStateSlots: 0, numSpecBackupSlots: 4 });
  assert.equal(planKvCache(denseGroupsOf(), { ...o, specBackupSlots: true, budgetBytes: 10 * page }).numSpecBackupSlots, 0);
});

test('CUDA refuses at start-up, naming the field, a hybrid model whose DeltaNet sizes its kernels are not built for', async () => {
  const { parseModelConfig } = await import('../../src/loader/config.js');
  const { testModelShapes } = await import('../../src/tools/test-model/shapes.js');
  const { backendRefusal } = await import('../../src/engine/backend-factory.js');
  const tiny = parseModelConfig(testModelShapes()['tiny-qwen3.5'], 'c');
  assert.match(backendRefusal(tiny, 'cuda') ?? '', /this qwen3_5 model's linear_key_head_dim 16 \(the CUDA DeltaNet kernel takes 32, 64, 128\): serve it with --backend cpu/);
  assert.equal(backendRefusal(tiny, 'cpu'), null);
  const taps = { ...tiny, hybrid: { ...tiny.hybrid!, linearKeyHeadDim: 128, linearConvKernel: 12 } };
  assert.match(backendRefusal(taps, 'cuda') ?? '', /linear_conv_kernel_dim 12 \(2 to 8 on CUDA\)/);
  assert.equal(backendRefusal(parseModelConfig(testModelShapes()['tiny-qwen3.5-128'], 'c'), 'cuda'), null);
  assert.equal(backendRefusal(parseModelConfig(testModelShapes()['qwen3.5-27b'], 'c'), 'cuda'), null);
  assert.equal(backendRefusal(tinyConfig('qwen2'), 'cuda'), null);
});

test('sizing with lowerToFit: states that would leave no page lower the running sequences to what half the budget ' +
  'holds', async () => {
  const { planKvCache } = await import('../../src/engine/backend-factory.js');
  const groups = [{ spec: { kind: 'recurrent', stateBytes: 1000 }, layers: [0, 2, 3] },
    { spec: { kind: 'full_attention', numKvHeads: 2, headDim: 8 }, layers: [1] }] as const;
  const page = 256;
  const o = { blockSize: 4, kvBytesPerElement: 2, maxNumSeqs: 256, lowerToFit: true };
  // 256 x 3000 bytes of state leave 1 page (block 0 is never handed out): 128 sequences, half the budget in 3000-byte slots
  const budgetBytes = 256 * 3000 + page;
  assert.deepEqual(planKvCache(groups, { ...o, budgetBytes }),
    { numBlocks: Math.floor((budgetBytes - 128 * 3000) / page), bytesPerBlock: page, numStateSlots: 128,
      bytesPerStateSlot: 3000, numCachedStateSlots: 0, numSpecBackupSlots: 0 });
  // with prefix caching, a saved state for every 4 running sequences: half the budget over 3,750 bytes a sequence
  const cached = planKvCache(groups, { ...o, budgetBytes, enablePrefixCaching: true });
  assert.deepEqual([cached.numStateSlots, cached.numCachedStateSlots], [102, 26]);
  // where they all fit, a saved state each
  const roomy = planKvCache(groups, { ...o, budgetBytes: 512 * 3000 + 2 * page, enablePrefixCaching: true });
  assert.deepEqual([roomy.numStateSlots, roomy.numCachedStateSlots], [256, 256]);
  // where they leave pages, nothing changes; without lowerToFit it is the error it was
  assert.equal(planKvCache(groups, { ...o, budgetBytes: 256 * 3000 + 2 * page }).numStateSlots, 256);
  assert.throws(() => planKvCache(groups, { ...o, lowerToFit: false, budgetBytes }), /holds no page/);
});

function denseGroupsOf() {
  return [{ spec: { kind: 'full_attention', numKvHeads: 2, headDim: 8 }, layers: [0] }] as const;
}

test('an explicit KV budget (--kv-cache-memory-bytes) replaces the utilization share on CUDA, capped by the free memory',
  async () => {
    const { sizeKvCache } = await import('../../src/engine/backend-factory.js');
    const config = tinyConfig('qwen2', { numLayers: 2 });
    const backend = new CpuBackend({ kvCacheBytes: 1 << 20, numThreads: 1 });
    try {
      const model = Model.load(config, randomWeightSource(config, { seed: 2 }), backend);
      const page = bytesPerKvBlock(16, 2, config.numKvHeads, config.headDim, 4);
      // as a CUDA backend beside an engine that allocated since this one started: the fraction's share is gone, the
      // free memory is not
      const memory = { availableKvBytes: 0, freeKvBytes: 50 * page, totalBytes: 1 << 30, weightBytes: 0 };
      backend.memory = () => memory;
      const o = { blockSize: 16, maxNumSeqs: 4 };
      assert.throws(() => sizeKvCache(model, backend, { ...o, kvCacheBytes: null } as never, 32), /budget \(0 bytes\)/);
      assert.equal(sizeKvCache(model, backend, { ...o, kvCacheBytes: 10 * page } as never, 32).numBlocks, 10);
      assert.equal(sizeKvCache(model, backend, { ...o, kvCacheBytes: 1000 * page } as never, 32).numBlocks, 50);
    } finally {
      backend.dispose();
    }
  });
