// Mixtures of experts on the CPU backend: the router (softmax, top-k, renormalization) against a brute-force
// reading of its definition, the experts' weighted sum against plain loops, a row's independence from the rows that
// share its experts, the roofline's share of expert bytes, block FP8 experts, and load errors naming the tensor.

import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CpuBackend } from '../../src/backend/cpu/cpu-backend.js';
import { routeTokens } from '../../src/backend/moe-route.js';
import { fp8BlockBytes } from '../../src/backend/fp8-linear.js';
import type { MoeExperts } from '../../src/backend/backend.js';
import { loadModelConfig, parseModelConfig } from '../../src/loader/config.js';
import { ModelLoadError } from '../../src/loader/errors.js';
import { openWeights } from '../../src/loader/model-dir.js';
import { Model } from '../../src/model/model.js';
import { SparseMoe } from '../../src/model/layers/moe.js';
import { randomWeightSource, seededRandom } from '../../src/model/random-weights.js';
import { makeTestModel } from '../../src/tools/make-test-model.js';
import { configForShape } from '../../src/tools/test-model/shapes.js';
import { runSteps } from './helpers.js';

const backend = new CpuBackend({ kvCacheBytes: 1 << 24, numThreads: 1 });
const root = mkdtempSync(join(tmpdir(), 'quire-moe-'));
after(() => {
  backend.dispose();
  rmSync(root, { recursive: true, force: true });
});

const randoms = (n: number, seed: number, scale = 1) => {
  const rand = seededRandom(seed);
  return Float32Array.from({ length: n }, () => scale * (2 * rand() - 1));
};
const upload = (name: string, shape: number[], data: Float32Array) =>
  backend.upload({ name, dtype: 'f32', shape, data: new Uint8Array(data.buffer) });

test('routing: softmax over the experts, the k most probable first, renormalized or not', () => {
  const logits = Float32Array.from([0.5, 2, -1, 2, 1, 0]);
  const all = [0.5, 2, -1, 2, 1, 0].map(Math.exp);
  const sum = all.reduce((a, b) => a + b, 0);
  const plain = routeTokens(logits, 1, 6, { topK: 3, renormalize: false });
  assert.deepEqual([...plain.experts], [1, 3, 4], 'a tie goes to the lower expert');
  assert.deepEqual([...plain.weights], [all[1]! / sum, all[3]! / sum, all[4]! / sum].map(Math.fround));
  const renorm = routeTokens(logits, 1, 6, { topK: 3, renormalize: true });
  const picked = all[1]! + all[3]! + all[4]!;
  assert.deepEqual([...renorm.weights], [all[1]! / picked, all[3]! / picked, all[4]! / picked].map(Math.fround));
  assert.throws(() => routeTokens(logits, 1, 6, { topK: 7, renormalize: true }), /top-k 7 of 6 experts/);
});

/** moeExperts computed with plain loops from its definition: out[t] = sum_j p_j down_e(silu(gate_e x) * up_e x). */
function naiveMoe(x: Float32Array, logits: Float32Array, T: number, H: number, E: number, I: number, k: number,
  gateUp: Float32Array, down: Float32Array): Float32Array {
  const out = new Float32Array(T * H);
  const { experts, weights } = routeTokens(logits, T, E, { topK: k, renormalize: true });
  for (let t = 0; t < T; t++) {
    for (let j = 0; j < k; j++) {
      const e = experts[t * k + j]!;
      const act = new Float64Array(I);
      for (let i = 0; i < I; i++) {
        let g = 0, u = 0;
        for (let h = 0; h < H; h++) {
          g += x[t * H + h]! * gateUp[(e * 2 * I + i) * H + h]!;
          u += x[t * H + h]! * gateUp[(e * 2 * I + I + i) * H + h]!;
        }
        act[i] = (g / (1 + Math.exp(-g))) * u;
      }
      for (let h = 0; h < H; h++) {
        let y = 0;
        for (let i = 0; i < I; i++) y += act[i]! * down[(e * H + h) * I + i]!;
        out[t * H + h]! += weights[t * k + j]! * y;
      }
    }
  }
  return out;
}

test('moeExperts: the router\'s logits, then each row the weighted sum of its top-k experts\' SwiGLU MLPs; a row alone gets the same bits', () => {
  const [T, H, E, I, k] = [9, 24, 6, 10, 2];
  const xs = randoms(T * H, 1);
  const router = upload('r', [E, H], randoms(E * H, 2, 0.6));
  const gu = randoms(E * 2 * I * H, 3, 0.3);
  const dn = randoms(E * H * I, 4, 0.3);
  const experts: MoeExperts = { numExperts: E, intermediate: I, gateUp: upload('gu', [E * 2 * I, H], gu), down: upload('d', [E * H, I], dn) };
  const route = { topK: k, renormalize: true };
  backend.beginStep({ numTokens: T } as never);
  const x = upload('x', [T, H], xs);
  const out = backend.toHost(backend.moeExperts(x, router, experts, route));
  const want = naiveMoe(xs, backend.toHost(backend.matmul(x, router)), T, H, E, I, k, gu, dn);
  const maxErr = want.reduce((m, v, i) => Math.max(m, Math.abs(v - out[i]!)), 0);
  assert.ok(maxErr < 1e-5, `max error ${maxErr}`);
  for (const t of [0, 4, 8]) {
    const alone = backend.toHost(backend.moeExperts(upload('x1', [1, H], xs.slice(t * H, (t + 1) * H)), router, experts, route));
    assert.deepEqual(alone, out.slice(t * H, (t + 1) * H), `row ${t} alone`);
  }
});

test('the roofline counts the routed share of the experts\' bytes: each expert more per token adds 1/E of them', () => {
  const config = parseModelConfig(configForShape('tiny-qwen3-moe', 'f32'), 'config.json');
  const bytes = (topK: number) => {
    const c = { ...config, moe: { ...config.moe!, topK } };
    const model = Model.load(c, randomWeightSource(c, { seed: 2 }), backend);
    assert.equal(model.parts.layers[0]!.ffn instanceof SparseMoe, true);
    assert.equal(model.parts.layers[1]!.ffn instanceof SparseMoe, false, 'mlp_only_layers [1] is a dense MLP');
    return model.weightBytesPerStep();
  };
  const { hiddenSize: H } = config;
  const { numExperts: E, expertIntermediateSize: I } = config.moe!;
  const oneLayersExperts = 3 * E * I * H * 4;
  // two sparse layers (0 and 2), f32 weights on the CPU backend
  assert.equal(bytes(6) - bytes(3), 2 * (3 / E) * oneLayersExperts);
});

test('the roofline counts block-FP8 experts\' routed share at a byte an element plus their block scales', () => {
  const config = parseModelConfig(configForShape('tiny-qwen3-moe-128', 'bf16', 'fp8'), 'config.json');
  const bytes = (topK: number) => {
    const c = { ...config, moe: { ...config.moe!, topK } };
    const model = Model.load(c, randomWeightSource(c, { seed: 2 }), backend);
    assert.equal((model.parts.layers[0]!.ffn as SparseMoe).experts.down.quantized, 'fp8_block');
    return model.weightBytesPerStep();
  };
  const { hiddenSize: H } = config;
  const { numExperts: E, expertIntermediateSize: I } = config.moe!;
  const oneLayersExperts = fp8BlockBytes(E * 2 * I, H) + fp8BlockBytes(E * H, I);
  // two sparse layers (0 and 2)
  assert.equal(bytes(6) - bytes(3), 2 * (3 / E) * oneLayersExperts);
});

test('block-FP8 experts: a checkpoint and --quantization fp8 at load compute the same, near the float model', async () => {
  for (const quantization of [null, 'fp8'] as const) {
    await makeTestModel({ shape: 'tiny-qwen3-moe-128', outDir: join(root, `q-${quantization}`), dtype: 'bf16', seed: 5, quantization });
  }
  const load = (name: string, opts = {}) => Model.load(loadModelConfig(join(root, name, 'config.json')), openWeights(join(root, name)), backend, opts);
  const rand = seededRandom(3);
  const ids = Array.from({ length: 20 }, () => Math.floor(rand() * 512));
  const steps = [[{ seq: 'a', start: 0, end: 12 }], [{ seq: 'a', start: 12, end: 20 }]];
  const checkpoint = load('q-fp8');
  assert.equal((checkpoint.parts.layers[0]!.ffn as SparseMoe).experts.gateUp.quantized, 'fp8_block');
  assert.equal((checkpoint.parts.layers[0]!.ffn as SparseMoe).router.quantized, undefined, 'the router keeps bf16');
  const fromCheckpoint = runSteps(checkpoint, { a: ids }, steps, 3).get('a')!;
  const online = runSteps(load('q-null', { quantization: 'fp8' }), { a: ids }, steps, 3).get('a')!;
  assert.deepEqual(online, fromCheckpoint);
  const plain = runSteps(load('q-null'), { a: ids }, steps, 3).get('a')!;
  const rms = (a: Float32Array) => Math.sqrt(a.reduce((s, v) => s + v * v, 0) / a.length);
  const errors = plain.map((row, pos) => rms(row.map((v, i) => v - fromCheckpoint[pos]![i]!)) / rms(row));
  assert.ok(Math.max(...errors) < 0.15 && Math.min(...errors) > 1e-3, `RMS-relative errors ${errors.map((e) => e.toFixed(4)).join(' ')}`);
});

test('a malformed expert or router tensor is a load error naming it', () => {
  const config = parseModelConfig(configForShape('tiny-qwen3-moe', 'f32'), 'config.json');
  const cases: [Record<string, { dtype: 'f32'; shape: number[] } | null>, RegExp][] = [
    [{ 'model.layers.2.mlp.experts.5.up_proj.weight': null }, /missing tensor model\.layers\.2\.mlp\.experts\.5\.up_proj\.weight \(expected f32 \[32, 64\]\)/],
    [{ 'model.layers.0.mlp.experts.3.down_proj.weight': { dtype: 'f32', shape: [64, 31] } },
      /tensor model\.layers\.0\.mlp\.experts\.3\.down_proj\.weight is f32 \[64, 31\], expected f32 \[64, 32\]/],
    [{ 'model.layers.0.mlp.gate.weight': { dtype: 'f32', shape: [7, 64] } }, /tensor model\.layers\.0\.mlp\.gate\.weight is f32 \[7, 64\], expected f32 \[8, 64\]/],
    [{ 'model.layers.2.mlp.experts.8.gate_proj.weight': { dtype: 'f32', shape: [32, 64] } },
      /tensor model\.layers\.2\.mlp\.experts\.8\.gate_proj\.weight names an expert past num_experts \(8 in config\.json\)/],
  ];
  for (const [overrides, message] of cases) {
    assert.throws(() => Model.load(config, randomWeightSource(config, { overrides }), backend),
      (err: unknown) => err instanceof ModelLoadError && message.test(err.message), String(message));
  }
});
