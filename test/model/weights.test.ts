import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { CpuBackend } from '../../src/backend/cpu/cpu-backend.js';
import { ModelLoadError } from '../../src/loader/errors.js';
import { randomWeightSource, tinyConfig } from '../../src/model/random-weights.js';
import { expectedTensors, loadWeights, validateWeights } from '../../src/model/weights.js';

const backend = new CpuBackend({ kvCacheBytes: 1 << 20, numThreads: 1 });
after(() => backend.dispose());
const file = '/models/tiny-qwen/model-00002-of-00002.safetensors';

test('expected tensors: qwen3 has q/k norms and no lm_head when tied; llama untied has lm_head', () => {
  const qwen = expectedTensors(tinyConfig('qwen3')).map((t) => t.name);
  const llama = expectedTensors(tinyConfig('llama')).map((t) => t.name);
  assert.ok(qwen.includes('model.layers.1.self_attn.q_norm.weight'));
  assert.ok(!qwen.includes('lm_head.weight'));
  assert.ok(!llama.some((n) => n.includes('q_norm')));
  assert.ok(llama.includes('lm_head.weight'));
  assert.equal(qwen.length, 1 + 2 * 11 + 1);
});

test('a missing tensor is named with its expected shape', () => {
  const c = tinyConfig('qwen3');
  const src = randomWeightSource(c, { file, overrides: { 'model.layers.1.mlp.up_proj.weight': null } });
  assert.throws(() => validateWeights(c, src), (e: unknown) => e instanceof ModelLoadError
    && /missing tensor model\.layers\.1\.mlp\.up_proj\.weight \(expected bf16 \[96, 64\]\)/.test(e.message)
    && e.message.startsWith('tiny-qwen'));
});

test('a wrong shape or dtype names the tensor, its file, and both shapes', () => {
  const c = tinyConfig('llama');
  const shape = randomWeightSource(c, { file, overrides: { 'model.layers.0.self_attn.k_proj.weight': { dtype: 'bf16', shape: [16, 64] } } });
  assert.throws(() => validateWeights(c, shape), (e: unknown) => e instanceof ModelLoadError
    && e.file === file && e.message === 'model-00002-of-00002.safetensors: tensor model.layers.0.self_attn.k_proj.weight is bf16 [16, 64], expected bf16 [32, 64]');
  const dtype = randomWeightSource(c, { file, overrides: { 'model.norm.weight': { dtype: 'f32', shape: [64] } } });
  assert.throws(() => validateWeights(c, dtype), /tensor model\.norm\.weight is f32 \[64\], expected bf16 \[64\]/);
  const untied = randomWeightSource(c, { overrides: { 'lm_head.weight': null } });
  assert.throws(() => loadWeights(c, untied, backend), /missing tensor lm_head\.weight/);
});

test('loading fuses q/k/v and gate/up by rows and ties lm_head to the embedding', () => {
  const c = tinyConfig('qwen3');
  const src = randomWeightSource(c);
  const w = loadWeights(c, src, backend);
  const qkvRows = (c.numHeads + 2 * c.numKvHeads) * c.headDim;
  assert.deepEqual(w.layers[0]!.qkv.shape, [qkvRows, c.hiddenSize]);
  assert.deepEqual(w.layers[0]!.gateUp.shape, [2 * c.intermediateSize, c.hiddenSize]);
  assert.equal(w.lmHead, w.embedTokens);
  const fused = backend.toHost(w.layers[1]!.qkv);
  const k = backend.toHost(backend.upload(src.read('model.layers.1.self_attn.k_proj.weight')));
  const kStart = c.numHeads * c.headDim * c.hiddenSize;
  assert.deepEqual(fused.subarray(kStart, kStart + k.length), k);
  const gateUp = backend.toHost(w.layers[1]!.gateUp);
  const up = backend.toHost(backend.upload(src.read('model.layers.1.mlp.up_proj.weight')));
  assert.deepEqual(gateUp.subarray(up.length), up);
  const untied = loadWeights(tinyConfig('qwen3', { tieWordEmbeddings: false }),
    randomWeightSource(tinyConfig('qwen3', { tieWordEmbeddings: false })), backend);
  assert.notEqual(untied.lmHead, untied.embedTokens);
});
