import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import type { Backend, Fp8BlockPart, Tensor } from '../../src/backend/backend.js';
import { CpuBackend } from '../../src/backend/cpu/cpu-backend.js';
import { ModelLoadError } from '../../src/loader/errors.js';
import { Model } from '../../src/model/model.js';
import { randomWeightSource, tinyConfig } from '../../src/model/random-weights.js';
import { expectedTensors, loadWeights, validateWeights } from '../../src/model/architectures/dense-weights.js';

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
  assert.deepEqual(w.layers[0]!.gateUp!.shape, [2 * c.intermediateSize, c.hiddenSize]);
  assert.equal(w.lmHead, w.embedTokens);
  const fused = backend.toHost(w.layers[1]!.qkv);
  const k = backend.toHost(backend.upload(src.read('model.layers.1.self_attn.k_proj.weight')));
  const kStart = c.numHeads * c.headDim * c.hiddenSize;
  assert.deepEqual(fused.subarray(kStart, kStart + k.length), k);
  const gateUp = backend.toHost(w.layers[1]!.gateUp!);
  const up = backend.toHost(backend.upload(src.read('model.layers.1.mlp.up_proj.weight')));
  assert.deepEqual(gateUp.subarray(up.length), up);
  const untied = loadWeights(tinyConfig('qwen3', { tieWordEmbeddings: false }),
    randomWeightSource(tinyConfig('qwen3', { tieWordEmbeddings: false })), backend);
  assert.notEqual(untied.lmHead, untied.embedTokens);
});

// Block FP8 (Qwen3-*-FP8): every projection dimension a multiple of 128
const fp8Config = (skip: string[] = []) => tinyConfig('qwen3', { hiddenSize: 128, intermediateSize: 256, headDim: 64,
  quantization: { method: 'fp8', weightBlockSize: [128, 128], modulesToNotConvert: skip } });

/** The CPU backend, recording what reaches uploadFp8Block (its tensors stand-ins: shape and marker). */
function fp8Recorder(): { backend: Backend; calls: { name: string; parts: Fp8BlockPart[] }[] } {
  const calls: { name: string; parts: Fp8BlockPart[] }[] = [];
  const recorder = Object.assign(Object.create(backend) as CpuBackend, {
    uploadFp8Block(name: string, parts: readonly Fp8BlockPart[]): Tensor {
      calls.push({ name, parts: [...parts] });
      return { shape: [parts.reduce((n, p) => n + p.weight.shape[0]!, 0), parts[0]!.weight.shape[1]!], quantized: 'fp8_block' };
    },
  });
  return { backend: recorder, calls };
}

test('block FP8: each projection e4m3 [N, K] with an f32 weight_scale_inv [N / 128, K / 128]; the rest in torch_dtype', () => {
  const byName = new Map(expectedTensors(fp8Config()).map((t) => [t.name, t]));
  assert.deepEqual(byName.get('model.layers.1.self_attn.k_proj.weight'), { name: 'model.layers.1.self_attn.k_proj.weight', shape: [128, 128], dtype: 'f8_e4m3' });
  assert.deepEqual(byName.get('model.layers.1.mlp.down_proj.weight_scale_inv')?.shape, [1, 2]);
  assert.equal(byName.get('model.layers.1.mlp.down_proj.weight_scale_inv')?.dtype, 'f32');
  assert.equal(byName.get('model.embed_tokens.weight')?.dtype, 'bf16');
  assert.equal(byName.get('model.layers.0.self_attn.q_norm.weight')?.dtype, 'bf16');
  assert.equal(byName.size, 1 + 2 * (11 + 7) + 1);
  const kept = new Map(expectedTensors(fp8Config(['o_proj'])).map((t) => [t.name, t]));
  assert.equal(kept.get('model.layers.0.self_attn.o_proj.weight')?.dtype, 'bf16', 'modules_to_not_convert');
  assert.ok(!kept.has('model.layers.0.self_attn.o_proj.weight_scale_inv'));
  validateWeights(fp8Config(), randomWeightSource(fp8Config(), { file }));
});

test('block FP8: a missing or misshapen weight_scale_inv, or a projection not stored as e4m3, is named', () => {
  const c = fp8Config();
  const q = 'model.layers.0.self_attn.q_proj.weight';
  const refused = (overrides: Parameters<typeof randomWeightSource>[1], message: string) =>
    assert.throws(() => validateWeights(c, randomWeightSource(c, { file, ...overrides })),
      (e: unknown) => e instanceof ModelLoadError && e.message.endsWith(message), message);
  refused({ overrides: { [`${q}_scale_inv`]: null } }, `missing tensor ${q}_scale_inv (expected f32 [2, 1])`);
  refused({ overrides: { [`${q}_scale_inv`]: { dtype: 'f32', shape: [1, 1] } } }, `tensor ${q}_scale_inv is f32 [1, 1], expected f32 [2, 1]`);
  refused({ overrides: { [`${q}_scale_inv`]: { dtype: 'bf16', shape: [2, 1] } } }, `tensor ${q}_scale_inv is bf16 [2, 1], expected f32 [2, 1]`);
  refused({ overrides: { [q]: { dtype: 'bf16', shape: [256, 128] } } }, `tensor ${q} is bf16 [256, 128], expected f8_e4m3 [256, 128]`);
});

test('block FP8: a projection dimension that is not a multiple of 128 is refused naming the tensor', () => {
  const c = tinyConfig('qwen3', { quantization: fp8Config().quantization });
  assert.throws(() => validateWeights(c, randomWeightSource(c, { file })), (e: unknown) => e instanceof ModelLoadError &&
    e.message === 'model-00002-of-00002.safetensors: tensor model.layers.0.self_attn.q_proj.weight is f8_e4m3 [64, 64]; ' +
      'Quire needs both dimensions of a block-FP8 projection to be multiples of 128');
});

test('block FP8: loading hands each fused projection\'s parts to uploadFp8Block; a backend without it is refused', () => {
  const c = fp8Config(['down_proj']);
  const src = randomWeightSource(c);
  const { backend: recorder, calls } = fp8Recorder();
  const w = loadWeights(c, src, recorder);
  assert.deepEqual(calls.slice(0, 3).map((x) => x.name),
    ['model.layers.0.self_attn.qkv_proj.weight', 'model.layers.0.mlp.gate_up_proj.weight', 'model.layers.0.self_attn.o_proj.weight']);
  const qkv = calls[0]!.parts;
  assert.deepEqual(qkv.map((p) => p.weight.name), ['q_proj', 'k_proj', 'v_proj'].map((n) => `model.layers.0.self_attn.${n}.weight`));
  assert.deepEqual(qkv[1], { weight: src.read('model.layers.0.self_attn.k_proj.weight'), scaleInv: src.read('model.layers.0.self_attn.k_proj.weight_scale_inv') });
  assert.equal(calls.length, 2 * 3, 'down_proj is in modules_to_not_convert');
  assert.deepEqual(w.layers[0]!.qkv.shape, [512, 128]);
  assert.equal(w.layers[0]!.down!.quantized, undefined);
  const noFp8 = Object.assign(Object.create(backend) as CpuBackend, { uploadFp8Block: undefined });
  assert.throws(() => loadWeights(c, src, noFp8), /^Error: the cpu backend cannot run block-FP8 weights \(config\.json quantization_config\)$/);
});

test('block FP8: weightBytesPerStep counts a byte an element and the f32 block scales', () => {
  const c = fp8Config();
  const bf16 = Model.load({ ...c, quantization: null }, randomWeightSource({ ...c, quantization: null }), backend);
  const quantized = Model.load(c, randomWeightSource(c), fp8Recorder().backend);
  // per layer: qkv [512, 128], o [128, 256], gate_up [512, 128], down [128, 256], at 4 bytes an element unquantized
  const projections = 512 * 128 + 128 * 256 + 512 * 128 + 128 * 256;
  const scales = (4 * 1 + 1 * 2 + 4 * 1 + 1 * 2) * 4;
  assert.equal(bf16.weightBytesPerStep() - quantized.weightBytesPerStep(), c.numLayers * (4 * projections - projections - scales));
});
