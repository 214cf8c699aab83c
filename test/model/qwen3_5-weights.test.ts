// Qwen3.5 checkpoint names and shapes as transformers stores them, and what the loader makes of them.

import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { CpuBackend } from '../../src/backend/cpu/cpu-backend.js';
import { parseModelConfig } from '../../src/loader/config.js';
import { bytesToF32 } from '../../src/loader/dtype.js';
import type { WeightSource } from '../../src/loader/types.js';
import { randomWeightSource } from '../../src/model/random-weights.js';
import { loadQwen35Weights, qwen35ExpectedTensors, qwen35Prefix, unreadTensorsNote } from '../../src/model/architectures/qwen3_5-weights.js';
import { mtpExpectedTensors } from '../../src/model/architectures/qwen3_5-mtp-weights.js';
import { tensorSpecsForConfig, testModelShapes } from '../../src/tools/test-model/shapes.js';
import { tensorBytes } from '../../src/loader/safetensors-write.js';

const backend = new CpuBackend({ kvCacheBytes: 1 << 20, numThreads: 1, kernel: 'js' });
after(() => backend.dispose());
const shapes = testModelShapes();
const config = { ...parseModelConfig(shapes['tiny-qwen3.5'], 'c'), dtype: 'f32' as const };

test('expected tensors: per layer kind, as transformers names them; make-test-model writes the same set', () => {
  const expected = qwen35ExpectedTensors(config);
  const names = expected.map((t) => t.name);
  for (const n of ['in_proj_qkv.weight', 'in_proj_z.weight', 'in_proj_b.weight', 'in_proj_a.weight', 'conv1d.weight',
    'dt_bias', 'A_log', 'norm.weight', 'out_proj.weight']) assert.ok(names.includes(`model.layers.2.linear_attn.${n}`), n);
  assert.ok(!names.some((n) => n.startsWith('model.layers.2.self_attn.')));
  assert.deepEqual(expected.find((t) => t.name === 'model.layers.1.self_attn.q_proj.weight')!.shape, [2 * 4 * 16, 64]);
  assert.deepEqual(expected.find((t) => t.name === 'model.layers.0.linear_attn.conv1d.weight')!.shape, [2 * 32 + 32, 1, 4]);
  assert.ok(names.includes('lm_head.weight'));
  // with the MTP head its config declares (dense, as the text model's layers)
  const mtp = mtpExpectedTensors(config);
  assert.ok(mtp.some((t) => t.name === 'mtp.layers.0.mlp.gate_proj.weight') && mtp.some((t) => t.name === 'mtp.fc.weight'));
  const written = tensorSpecsForConfig(shapes['tiny-qwen3.5']!, 'f32').map((s) => `${s.name} ${s.shape.join('x')}`).sort();
  assert.deepEqual(written, [...expected, ...mtp].map((t) => `${t.name} ${t.shape.join('x')}`).sort());
});

test('qwen3.5-27b: the text model under model.language_model., its parameter count', () => {
  const specs = tensorSpecsForConfig(shapes['qwen3.5-27b']!, 'bf16');
  const c = parseModelConfig(shapes['qwen3.5-27b'], 'c');
  assert.deepEqual(specs.map((s) => s.name).sort(), [...qwen35ExpectedTensors(c, 'model.language_model.'), ...mtpExpectedTensors(c)]
    .map((t) => t.name).sort());
  assert.ok(specs.some((s) => s.name === 'model.language_model.layers.62.linear_attn.in_proj_qkv.weight'));
  // 26.9e9 in the text model: the published 27.8e9 (55.56 GB of bf16 in Qwen3.6-27B's index) less the vision tower
  // and the MTP head; the head (written too: mtp_num_hidden_layers 1) 0.42e9, one layer and fc
  const params = (mtp: boolean) => specs.filter((s) => s.name.startsWith('mtp.') === mtp).reduce((a, s) => a + tensorBytes(s) / 2, 0);
  assert.ok(Math.abs(params(false) / 26.9e9 - 1) < 0.01, String(params(false)));
  assert.ok(Math.abs(params(true) / 0.42e9 - 1) < 0.05, String(params(true)));
});

test('the prefix follows the checkpoint; the vision tower and MTP head are named, counted and left unread', () => {
  assert.equal(qwen35Prefix({ has: (n) => n === 'model.language_model.embed_tokens.weight' }), 'model.language_model.');
  assert.equal(qwen35Prefix({ has: () => false }), 'model.');
  assert.equal(unreadTensorsNote({ names: () => ['model.visual.blocks.0.attn.qkv.weight', 'model.visual.merger.linear_fc1.weight',
    'mtp.fc.weight', 'model.language_model.norm.weight'] }),
  'Qwen3.5 checkpoint: serving its text model; 2 vision-tower tensors (model.visual.*) and 1 MTP-head tensors (mtp.*) left unread');
  assert.equal(unreadTensorsNote({ names: () => ['model.norm.weight'] }), null);
});

/** A source whose every tensor is read from `base` under another name. */
function renamed(base: WeightSource, rename: (n: string) => string, extra: string[]): WeightSource {
  const back = new Map(base.names().map((n) => [rename(n), n]));
  const orig = (n: string) => back.get(n) ?? n;
  return { names: () => [...back.keys(), ...extra], has: (n) => back.has(n), info: (n) => base.info(orig(n)),
    read: (n) => ({ ...base.read(orig(n)), name: n }) };
}

test('loading: q_proj split per head into q and gate, b and a fused, (1 + w) norms, conv taps [C, K]', () => {
  const src = randomWeightSource(config, { seed: 3 });
  const w = loadQwen35Weights(config, src, backend);
  const f32 = (n: string) => bytesToF32('f32', src.read(n).data);
  const host = (t: Parameters<typeof backend.toHost>[0]) => backend.toHost(t);
  const D = 16;
  const q = f32('model.layers.1.self_attn.q_proj.weight');
  const a = w.layers[1]!.attention!;
  const qkv = host(a.qkv);
  const gate = host(a.gate);
  // head 2's query rows are q_proj rows [64, 80), its gate rows [80, 96)
  assert.deepEqual(qkv.subarray(2 * D * 64, 3 * D * 64), q.subarray(4 * D * 64, 5 * D * 64));
  assert.deepEqual(gate.subarray(2 * D * 64, 3 * D * 64), q.subarray(5 * D * 64, 6 * D * 64));
  assert.deepEqual(qkv.subarray(4 * D * 64, 4 * D * 64 + 32 * 64), f32('model.layers.1.self_attn.k_proj.weight'));
  assert.deepEqual(host(a.qNorm), f32('model.layers.1.self_attn.q_norm.weight').map((v) => 1 + v));
  assert.deepEqual(host(w.layers[0]!.inputNorm), f32('model.layers.0.input_layernorm.weight').map((v) => 1 + v));
  assert.deepEqual(host(w.finalNorm!), f32('model.norm.weight').map((v) => 1 + v));
  const d = w.layers[0]!.deltaNet!;
  // the gated norm's weight is used as is
  assert.deepEqual(host(d.norm), f32('model.layers.0.linear_attn.norm.weight'));
  // in_proj: in_proj_qkv's rows, in_proj_z's, in_proj_b's, in_proj_a's
  assert.deepEqual(host(d.inProj), new Float32Array(['qkv', 'z', 'b', 'a'].flatMap((p) => [...f32(`model.layers.0.linear_attn.in_proj_${p}.weight`)])));
  assert.deepEqual(d.conv.shape, [96, 4]);
  assert.equal(w.layers[1]!.deltaNet, null);
  assert.equal(w.layers[0]!.attention, null);
});

test('a multimodal checkpoint loads its text model from model.language_model.*, the same tensors', () => {
  const src = randomWeightSource(config, { seed: 3 });
  const nested = renamed(src, (n) => n.replace(/^model\./, 'model.language_model.'), ['model.visual.patch_embed.proj.weight']);
  const a = loadQwen35Weights(config, src, backend);
  const b = loadQwen35Weights(config, nested, backend);
  assert.deepEqual(backend.toHost(b.layers[2]!.deltaNet!.inProj), backend.toHost(a.layers[2]!.deltaNet!.inProj));
  assert.deepEqual(backend.toHost(b.lmHead!), backend.toHost(a.lmHead!));
});

test('a missing or misshapen tensor is named', () => {
  const missing = randomWeightSource(config, { overrides: { 'model.layers.2.linear_attn.A_log': null } });
  assert.throws(() => loadQwen35Weights(config, missing, backend), /missing tensor model\.layers\.2\.linear_attn\.A_log \(expected f32 \[4\]\)/);
  const bad = randomWeightSource(config, { overrides: { 'model.layers.0.linear_attn.conv1d.weight': { dtype: 'f32', shape: [96, 4] } } });
  assert.throws(() => loadQwen35Weights(config, bad, backend), /conv1d\.weight is f32 \[96, 4\], expected f32 \[96, 1, 4\]/);
});
