// The hybrid mixtures of experts' checkpoint names and shapes as transformers stores them, and what the loader makes
// of them: Qwen3-Next's DeltaNet projections fused per key head, reordered into in_proj_qkv / in_proj_z / in_proj_ba;
// the routed experts fused (Qwen3.5-MoE's published layout) or one module each (Qwen3-Next's) stacked alike; the shared
// expert's gate and up fused; load errors naming the tensor.

import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { CpuBackend } from '../../src/backend/cpu/cpu-backend.js';
import { parseModelConfig } from '../../src/loader/config.js';
import { bytesToF32 } from '../../src/loader/dtype.js';
import { ModelLoadError } from '../../src/loader/errors.js';
import { tensorBytes } from '../../src/loader/safetensors-write.js';
import type { HostTensor, WeightSource } from '../../src/loader/types.js';
import { qwen3NextInProjOrder } from '../../src/model/architectures/qwen3_next-weights.js';
import { loadQwen35Weights, qwen35ExpectedTensors } from '../../src/model/architectures/qwen3_5-weights.js';
import { mtpExpectedTensors } from '../../src/model/architectures/qwen3_5-mtp-weights.js';
import { Model } from '../../src/model/model.js';
import { randomWeightSource } from '../../src/model/random-weights.js';
import { tensorSpecsForConfig, testModelShapes } from '../../src/tools/test-model/shapes.js';
import { buildForwardBatch } from '../../src/engine/batch-builder.js';

const backend = new CpuBackend({ kvCacheBytes: 1 << 22, numThreads: 1, kernel: 'js' });
after(() => backend.dispose());
const shapes = testModelShapes();
const moeConfig = { ...parseModelConfig(shapes['tiny-qwen3.5-moe'], 'c'), dtype: 'f32' as const };
const nextConfig = { ...parseModelConfig(shapes['tiny-qwen3-next'], 'c'), dtype: 'f32' as const };
const f32 = (t: HostTensor) => bytesToF32(t.dtype, t.data);

test('Qwen3-Next\'s in_proj_qkvz and in_proj_ba, grouped per key head, reordered: a hand-built example', () => {
  // 2 key heads of Dk 2, 2 value heads of Dv 1 a key head. in_proj_qkvz per key head g: q (2 rows), k (2), the v of
  // value heads 2g and 2g + 1, their z; in_proj_ba per key head: b of its two value heads, then their a.
  const qkvz = ['q0.0', 'q0.1', 'k0.0', 'k0.1', 'v0', 'v1', 'z0', 'z1', 'q1.0', 'q1.1', 'k1.0', 'k1.1', 'v2', 'v3', 'z2', 'z3'];
  const ba = ['b0', 'b1', 'a0', 'a1', 'b2', 'b3', 'a2', 'a3'];
  const order = qwen3NextInProjOrder({ layerTypes: [], rotaryDim: 2, linearNumKeyHeads: 2, linearNumValueHeads: 4,
    linearKeyHeadDim: 2, linearValueHeadDim: 1, linearConvKernel: 4 });
  assert.deepEqual(order.qkv.map((r) => qkvz[r]), ['q0.0', 'q0.1', 'q1.0', 'q1.1', 'k0.0', 'k0.1', 'k1.0', 'k1.1', 'v0', 'v1', 'v2', 'v3']);
  assert.deepEqual(order.z.map((r) => qkvz[r]), ['z0', 'z1', 'z2', 'z3']);
  assert.deepEqual(order.ba.map((r) => ba[r]), ['b0', 'b1', 'b2', 'b3', 'a0', 'a1', 'a2', 'a3']);
});

test('Qwen3-Next loading: the DeltaNet layer gets the reordered rows; attention and norms as Qwen3.5\'s', () => {
  const src = randomWeightSource(nextConfig, { seed: 4 });
  const w = loadQwen35Weights(nextConfig, src, backend);
  const order = qwen3NextInProjOrder(nextConfig.hybrid!);
  const H = nextConfig.hiddenSize;
  const qkvz = f32(src.read('model.layers.2.linear_attn.in_proj_qkvz.weight'));
  const baRows = f32(src.read('model.layers.2.linear_attn.in_proj_ba.weight'));
  const pick = (m: Float32Array, rows: number[]) => Float32Array.from(rows.flatMap((r) => [...m.subarray(r * H, (r + 1) * H)]));
  const d = w.layers[2]!.deltaNet!;
  // one in_proj: qkv's rows, z's, then b's and a's
  assert.deepEqual(backend.toHost(d.inProj), Float32Array.from([...pick(qkvz, order.qkv), ...pick(qkvz, order.z),
    ...pick(baRows, order.ba)]));
  assert.deepEqual([d.inProj.shape, d.conv.shape], [[96 + 32 + 8, 64], [96, 4]]);
  assert.deepEqual(backend.toHost(w.layers[0]!.inputNorm), f32(src.read('model.layers.0.input_layernorm.weight')).map((v) => 1 + v));
});

test('expected tensors as transformers names them, and make-test-model writes the same set', () => {
  const names = (c: typeof moeConfig) => qwen35ExpectedTensors(c).map((t) => `${t.name} ${t.shape.join('x')}`).sort();
  const moe = names(moeConfig);
  for (const n of ['mlp.gate.weight 8x64', 'mlp.experts.gate_up_proj 8x48x64', 'mlp.experts.down_proj 8x64x24',
    'mlp.shared_expert.gate_proj.weight 48x64', 'mlp.shared_expert.up_proj.weight 48x64', 'mlp.shared_expert.down_proj.weight 64x48',
    'mlp.shared_expert_gate.weight 1x64', 'linear_attn.in_proj_qkv.weight 96x64']) assert.ok(moe.includes(`model.layers.0.${n}`), n);
  assert.ok(!moe.some((n) => n.includes('mlp.gate_proj') || n.includes('experts.0.')));
  const next = names(nextConfig);
  for (const n of ['linear_attn.in_proj_qkvz.weight 128x64', 'linear_attn.in_proj_ba.weight 8x64', 'mlp.experts.7.down_proj.weight 64x32',
    'mlp.experts.0.gate_proj.weight 32x64', 'mlp.shared_expert_gate.weight 1x64']) assert.ok(next.includes(`model.layers.0.${n}`), n);
  assert.ok(!next.some((n) => n.includes('in_proj_qkv.') || n.includes('in_proj_b.')));
  // layer 2 is in mlp_only_layers: a dense MLP of intermediate_size
  assert.ok(next.includes('model.layers.2.mlp.gate_proj.weight 128x64') && !next.some((n) => n.startsWith('model.layers.2.mlp.experts')));
  // and the MTP head each declares, its layer sparse in each family's layout
  const mtp = (c: typeof moeConfig) => mtpExpectedTensors(c).map((t) => `${t.name} ${t.shape.join('x')}`);
  assert.ok(mtp(moeConfig).includes('mtp.layers.0.mlp.experts.gate_up_proj 8x48x64'));
  assert.ok(mtp(nextConfig).includes('mtp.layers.0.mlp.experts.7.down_proj.weight 64x32'));
  for (const [shape, c, expected] of [['tiny-qwen3.5-moe', moeConfig, moe], ['tiny-qwen3-next', nextConfig, next]] as const) {
    assert.deepEqual(tensorSpecsForConfig(shapes[shape]!, 'f32').map((s) => `${s.name} ${s.shape.join('x')}`).sort(),
      [...expected, ...mtp(c)].sort(), shape);
  }
});

test('the public shapes: their checkpoint layouts and parameter counts', () => {
  // the text model's (the MTP head qwen3.5-35b-a3b declares is written too, and counted apart)
  const count = (shape: string) => tensorSpecsForConfig(shapes[shape]!, 'bf16').filter((s) => !s.name.startsWith('mtp.'))
    .reduce((a, s) => a + tensorBytes(s) / 2, 0);
  const moe = tensorSpecsForConfig(shapes['qwen3.5-35b-a3b']!, 'bf16');
  const c = parseModelConfig(shapes['qwen3.5-35b-a3b'], 'c');
  assert.deepEqual(moe.map((s) => s.name).sort(), [...qwen35ExpectedTensors(c, 'model.language_model.'), ...mtpExpectedTensors(c)]
    .map((t) => t.name).sort());
  assert.deepEqual(moe.find((s) => s.name === 'model.language_model.layers.0.mlp.experts.gate_up_proj')!.shape, [256, 1024, 2048]);
  assert.deepEqual(moe.find((s) => s.name === 'model.language_model.layers.39.mlp.experts.down_proj')!.shape, [256, 2048, 512]);
  // the model cards' 35B and 80B in total count the vision tower and the MTP head, which are not counted here
  assert.ok(Math.abs(count('qwen3.5-35b-a3b') / 34.66e9 - 1) < 0.001 && count('qwen3.5-35b-a3b') < 35e9, String(count('qwen3.5-35b-a3b')));
  assert.ok(Math.abs(count('qwen3-next-80b-a3b') / 79.67e9 - 1) < 0.001 && count('qwen3-next-80b-a3b') < 80e9, String(count('qwen3-next-80b-a3b')));
  const next = tensorSpecsForConfig(shapes['qwen3-next-80b-a3b']!, 'bf16').map((s) => s.name);
  assert.ok(next.includes('model.layers.47.mlp.experts.511.up_proj.weight') && next.includes('model.layers.0.linear_attn.in_proj_qkvz.weight'));
});

/** `base`'s fused experts ([E, 2I, H] and [E, H, I]) split into one module an expert (the per-expert layout). */
function perExpert(base: WeightSource, E: number, I: number, H: number): WeightSource {
  const parts = new Map<string, { from: string; rows: [number, number] }>();
  for (const n of base.names()) {
    const m = n.replace(/(gate_up_proj|down_proj)$/, '');
    for (let e = 0; e < E && n.endsWith('mlp.experts.gate_up_proj'); e++) {
      parts.set(`${m}${e}.gate_proj.weight`, { from: n, rows: [e * 2 * I, e * 2 * I + I] });
      parts.set(`${m}${e}.up_proj.weight`, { from: n, rows: [e * 2 * I + I, (e + 1) * 2 * I] });
    }
    for (let e = 0; e < E && n.endsWith('mlp.experts.down_proj'); e++) {
      parts.set(`${m}${e}.down_proj.weight`, { from: n, rows: [e * H, (e + 1) * H] });
    }
  }
  const kept = base.names().filter((n) => !n.endsWith('gate_up_proj') && !n.endsWith('experts.down_proj'));
  const names = [...kept, ...parts.keys()];
  const width = (n: string) => base.info(parts.get(n)!.from).shape[2]!;
  return {
    names: () => names,
    has: (n) => names.includes(n),
    info: (n) => {
      const p = parts.get(n);
      return p ? { ...base.info(p.from), shape: [p.rows[1] - p.rows[0], width(n)] } : base.info(n);
    },
    read: (n) => {
      const p = parts.get(n);
      if (!p) return base.read(n);
      const t = base.read(p.from);
      const rowBytes = width(n) * 4;
      return { name: n, dtype: t.dtype, shape: [p.rows[1] - p.rows[0], width(n)], data: t.data.slice(p.rows[0] * rowBytes, p.rows[1] * rowBytes) };
    },
  };
}

test('fused and per-expert checkpoints load the same stacked experts and give the same logits; the shared expert fused', () => {
  const fused = randomWeightSource(moeConfig, { seed: 9 });
  const split = perExpert(fused, 8, 24, 64);
  assert.ok(split.has('model.layers.3.mlp.experts.7.up_proj.weight') && !split.has('model.layers.3.mlp.experts.gate_up_proj'));
  const a = loadQwen35Weights(moeConfig, fused, backend);
  const b = loadQwen35Weights(moeConfig, split, backend);
  for (const l of [0, 3]) {
    const [ma, mb] = [a.layers[l]!.moe!, b.layers[l]!.moe!];
    assert.deepEqual(ma.gateUp.shape, [8 * 48, 64]);
    assert.deepEqual(ma.down.shape, [8 * 64, 24]);
    assert.deepEqual(backend.toHost(ma.gateUp), backend.toHost(mb.gateUp));
    assert.deepEqual(backend.toHost(ma.down), backend.toHost(mb.down));
    assert.deepEqual(backend.toHost(ma.gateUp), f32(fused.read(`model.layers.${l}.mlp.experts.gate_up_proj`)), 'the fused bytes as they are');
  }
  const sh = a.layers[1]!.moe!.shared;
  const p = 'model.layers.1.mlp.shared_expert';
  assert.deepEqual(backend.toHost(sh.gateUp), Float32Array.from([...f32(fused.read(`${p}.gate_proj.weight`)), ...f32(fused.read(`${p}.up_proj.weight`))]));
  assert.deepEqual(backend.toHost(sh.gate), f32(fused.read(`${p}_gate.weight`)));
  const logits = (src: WeightSource) => {
    const model = Model.load(moeConfig, src, backend);
    backend.allocateKvCache(model.kvCacheSpec(4, 16));
    backend.allocateRecurrentState(model.recurrentStateLayout(1)!);
    const batch = buildForwardBatch([{ tokenIds: [3, 1, 4, 1, 5], startPosition: 0, blockTable: [1], sample: true }], 16);
    batch.stateSlots = new Int32Array([0]);
    return model.forward(batch);
  };
  assert.deepEqual(logits(split), logits(fused));
});

test('a multimodal Qwen3.5-MoE checkpoint: its text model under model.language_model.*, an expert past num_experts named', () => {
  const src = randomWeightSource(moeConfig, { seed: 9 });
  const nested: WeightSource = {
    names: () => src.names().map((n) => n.replace(/^model\./, 'model.language_model.')),
    has: (n) => src.has(n.replace(/^model\.language_model\./, 'model.')),
    info: (n) => src.info(n.replace(/^model\.language_model\./, 'model.')),
    read: (n) => ({ ...src.read(n.replace(/^model\.language_model\./, 'model.')), name: n }),
  };
  const w = loadQwen35Weights(moeConfig, nested, backend);
  assert.deepEqual(backend.toHost(w.layers[2]!.moe!.down), f32(src.read('model.layers.2.mlp.experts.down_proj')));
  const split = perExpert(nested, 8, 24, 64);
  const ninth = 'model.language_model.layers.1.mlp.experts.8.up_proj.weight';
  const extra: WeightSource = { ...split, names: () => [...split.names(), ninth],
    info: (n) => split.info(n === ninth ? n.replace('.8.', '.7.') : n) };
  assert.throws(() => loadQwen35Weights(moeConfig, extra, backend), (err: unknown) => err instanceof ModelLoadError &&
    /model\.language_model\.layers\.1\.mlp\.experts\.8\.up_proj\.weight names an expert past num_experts \(8 in config\.json\)/.test(err.message));
});

test('a missing or misshapen expert, shared expert or fused projection is a load error naming the tensor', () => {
  const cases: [typeof moeConfig, Record<string, { dtype: 'f32'; shape: number[] } | null>, RegExp][] = [
    [moeConfig, { 'model.layers.1.mlp.shared_expert_gate.weight': null }, /missing tensor model\.layers\.1\.mlp\.shared_expert_gate\.weight \(expected f32 \[1, 64\]\)/],
    [moeConfig, { 'model.layers.0.mlp.experts.gate_up_proj': { dtype: 'f32', shape: [8, 64, 48] } },
      /tensor model\.layers\.0\.mlp\.experts\.gate_up_proj is f32 \[8, 64, 48\], expected f32 \[8, 48, 64\]/],
    [moeConfig, { 'model.layers.3.mlp.shared_expert.down_proj.weight': { dtype: 'f32', shape: [64, 32] } },
      /shared_expert\.down_proj\.weight is f32 \[64, 32\], expected f32 \[64, 48\]/],
    [nextConfig, { 'model.layers.0.linear_attn.in_proj_qkvz.weight': null }, /missing tensor model\.layers\.0\.linear_attn\.in_proj_qkvz\.weight \(expected f32 \[128, 64\]\)/],
    [nextConfig, { 'model.layers.2.linear_attn.in_proj_ba.weight': { dtype: 'f32', shape: [4, 64] } }, /in_proj_ba\.weight is f32 \[4, 64\], expected f32 \[8, 64\]/],
    [nextConfig, { 'model.layers.1.mlp.experts.5.gate_proj.weight': null }, /missing tensor model\.layers\.1\.mlp\.experts\.5\.gate_proj\.weight/],
    [nextConfig, { 'model.layers.2.mlp.up_proj.weight': null }, /missing tensor model\.layers\.2\.mlp\.up_proj\.weight \(expected f32 \[128, 64\]\)/],
  ];
  for (const [config, overrides, message] of cases) {
    assert.throws(() => loadQwen35Weights(config, randomWeightSource(config, { overrides }), backend),
      (err: unknown) => err instanceof ModelLoadError && message.test(err.message), String(message));
  }
});
