// The multi-token-prediction head (model/mtp-head.ts) on the CPU backend against a hand computation of vLLM's formula
// (Qwen3_5MultiTokenPredictor) on tiny-qwen3.5's random weights. transformers does not run the MTP head, so there is no
// independent implementation to hold it to: the reference here is the formula written out in plain f64 loops over the
// checkpoint's tensors, one position at a time, in the test alone (no Quire op, no Quire layer):
//
//   x_t = fc [ rmsnorm(embed(x_{t+1})) (1 + w_e) | rmsnorm(h_t) (1 + w_h) ]
//   r = x_t; a = rmsnorm(r) (1 + w_in); q, gate, k, v; per-head rmsnorm of q and k (1 + w); RoPE on the first
//   rotary channels; causal attention over the head's own k, v of positions 0 .. t; r += o(attn * sigmoid(gate));
//   r += down(silu(gate_proj m) * up_proj m), m = rmsnorm(r) (1 + w_post); out_t = rmsnorm(r) (1 + w_norm);
//   logits_t = lm_head out_t
//
// h_t is the target's final hidden state (after its final norm) at t, read from the model (the target itself is held to
// transformers by test/model/reference.test.ts). Checked: the head's catch-up over a prompt's positions 0 .. n - 2 (its
// input the hidden states the target's forward kept), then one recurrent step at n - 1 on its own output.

import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { CpuBackend } from '../../src/backend/cpu/cpu-backend.js';
import { buildForwardBatch } from '../../src/engine/batch-builder.js';
import { parseModelConfig } from '../../src/loader/config.js';
import { bytesToF32 } from '../../src/loader/dtype.js';
import { Model } from '../../src/model/model.js';
import { randomWeightSource } from '../../src/model/random-weights.js';
import { testModelShapes } from '../../src/tools/test-model/shapes.js';

const backend = new CpuBackend({ kvCacheBytes: 1 << 24, numThreads: 1, kernel: 'js' });
after(() => backend.dispose());
const config = { ...parseModelConfig(testModelShapes()['tiny-qwen3.5'], 'c'), dtype: 'f32' as const };
const source = randomWeightSource(config, { seed: 11 });

const get = (name: string): number[] => [...bytesToF32('f32', source.read(name).data)];
const onePlus = (name: string): number[] => get(name).map((v) => 1 + v);
/** y = W x for W [rows, cols] row-major, over columns [from, from + x.length). */
function matvec(W: number[], cols: number, x: number[], from = 0): number[] {
  const rows = W.length / cols;
  return Array.from({ length: rows }, (_, r) => x.reduce((a, v, j) => a + W[r * cols + from + j]! * v, 0));
}
function rmsnorm(x: number[], g: number[]): number[] {
  const inv = 1 / Math.sqrt(x.reduce((a, v) => a + v * v, 0) / x.length + config.rmsNormEps);
  return x.map((v, i) => v * inv * g[i]!);
}
const add = (a: number[], b: number[]): number[] => a.map((v, i) => v + b[i]!);
const sigmoid = (v: number): number => 1 / (1 + Math.exp(-v));

/** The head by hand: position by position, keeping its own k and v; returns each position's logits and output. */
function handHead(tokens: number[], hidden: number[][]): { logits: number[][]; out: number[][] } {
  const H = config.hiddenSize;
  const [nh, nkv, D] = [config.numHeads, config.numKvHeads, config.headDim];
  const rd = config.hybrid!.rotaryDim;
  const p = 'mtp.layers.0.';
  const embed = get('model.embed_tokens.weight');
  const [fc, qW, kW, vW, oW] = ['mtp.fc.weight', `${p}self_attn.q_proj.weight`, `${p}self_attn.k_proj.weight`,
    `${p}self_attn.v_proj.weight`, `${p}self_attn.o_proj.weight`].map(get) as [number[], number[], number[], number[], number[]];
  const [gateW, upW, downW, lmHead] = [`${p}mlp.gate_proj.weight`, `${p}mlp.up_proj.weight`, `${p}mlp.down_proj.weight`,
    'lm_head.weight'].map(get) as [number[], number[], number[], number[]];
  const rope = (x: number[], pos: number): number[] => {
    const y = [...x];
    for (let i = 0; i < rd / 2; i++) {
      const angle = pos * 10000 ** (-(2 * i) / rd);
      const [a, b] = [x[i]!, x[i + rd / 2]!];
      y[i] = a * Math.cos(angle) - b * Math.sin(angle);
      y[i + rd / 2] = b * Math.cos(angle) + a * Math.sin(angle);
    }
    return y;
  };
  const keys: number[][][] = [];
  const values: number[][][] = [];
  const logits: number[][] = [];
  const out: number[][] = [];
  tokens.forEach((token, t) => {
    const e = rmsnorm(embed.slice(token * H, (token + 1) * H), onePlus('mtp.pre_fc_norm_embedding.weight'));
    const h = rmsnorm(hidden[t]!, onePlus('mtp.pre_fc_norm_hidden.weight'));
    let r = add(matvec(fc, 2 * H, e, 0), matvec(fc, 2 * H, h, H));
    const a = rmsnorm(r, onePlus(`${p}input_layernorm.weight`));
    const [q2, k, v] = [matvec(qW, H, a), matvec(kW, H, a), matvec(vW, H, a)];
    keys.push(Array.from({ length: nkv }, (_, g) => rope(rmsnorm(k.slice(g * D, (g + 1) * D), onePlus(`${p}self_attn.k_norm.weight`)), t)));
    values.push(Array.from({ length: nkv }, (_, g) => v.slice(g * D, (g + 1) * D)));
    const attn: number[] = [];
    for (let head = 0; head < nh; head++) {
      const q = rope(rmsnorm(q2.slice(2 * head * D, 2 * head * D + D), onePlus(`${p}self_attn.q_norm.weight`)), t);
      const gate = q2.slice(2 * head * D + D, 2 * head * D + 2 * D);
      const g = Math.floor(head / (nh / nkv));
      const scores = keys.map((ks) => ks[g]!.reduce((acc, kv, i) => acc + kv * q[i]!, 0) / Math.sqrt(D));
      const max = Math.max(...scores);
      const ws = scores.map((s) => Math.exp(s - max));
      const sum = ws.reduce((x, y) => x + y, 0);
      for (let i = 0; i < D; i++) attn.push(ws.reduce((acc, w, s) => acc + w * values[s]![g]![i]!, 0) / sum * sigmoid(gate[i]!));
    }
    r = add(r, matvec(oW, nh * D, attn));
    const m = rmsnorm(r, onePlus(`${p}post_attention_layernorm.weight`));
    const [gt, up] = [matvec(gateW, H, m), matvec(upW, H, m)];
    r = add(r, matvec(downW, gt.length, gt.map((x, i) => x * sigmoid(x) * up[i]!)));
    const o = rmsnorm(r, onePlus('mtp.norm.weight'));
    out.push(o);
    logits.push(matvec(lmHead, H, o));
  });
  return { logits, out };
}

function assertClose(actual: Float32Array, expected: number[], what: string): void {
  const scale = Math.max(1, ...expected.map(Math.abs));
  const worst = expected.reduce((w, v, i) => Math.max(w, Math.abs(actual[i]! - v)), 0);
  assert.ok(worst < 1e-4 * scale, `${what}: off by ${worst} (logits up to ${scale})`);
}

test('the MTP head computes vLLM\'s formula: catch-up over a prompt on the target\'s kept hidden states, then a step on its own output', () => {
  const model = Model.load(config, source, backend, { mtp: true });
  assert.equal(model.kvCacheSpec(8, 16).numLayers, 3, 'the head\'s K and V: one more KV layer after the two attention layers');
  model.allocateMtpCarry(64);
  backend.allocateKvCache(model.kvCacheSpec(8, 16));
  backend.allocateRecurrentState(model.recurrentStateLayout(1)!);
  const prompt = [17, 300, 4, 4, 91, 250, 6, 77, 130, 2, 45, 300, 18, 9, 211, 64, 5, 33];
  const n = prompt.length;
  const blockTable = [3, 5];
  // the target over the prompt, every position's logits row wanted: its final hidden states, and the carry kept
  model.forward(buildForwardBatch([{ tokenIds: prompt, startPosition: 0, blockTable, sample: true, promptLogitsFrom: 0,
    promptLogitsTo: n - 1, stateSlot: 0 }], 16));
  // logits rows: position n - 1 (the sampled row), then positions 0 .. n - 2
  const rows = model.hiddenRows(Array.from({ length: n }, (_, i) => i));
  const H = config.hiddenSize;
  const hidden = Array.from({ length: n }, (_, t) => [...rows.subarray(((t + 1) % n) * H, ((t + 1) % n + 1) * H)]);
  const hand = handHead(prompt.slice(1), hidden.slice(0, n - 1));
  // the head's catch-up: position t takes token t + 1 and the carry's row t; every position's logits
  const catchUp = buildForwardBatch([{ tokenIds: prompt.slice(1), startPosition: 0, blockTable, sample: true, promptLogitsFrom: 0,
    promptLogitsTo: n - 2 }], 16);
  catchUp.carryRows = Int32Array.from({ length: n - 1 }, (_, t) => t);
  const V = config.vocabSize;
  const logits = model.mtpLogits(catchUp);
  for (let t = 0; t < n - 1; t++) {
    const row = t === n - 2 ? 0 : t + 1;
    assertClose(logits.subarray(row * V, (row + 1) * V), hand.logits[t]!, `position ${t}`);
  }
  // one step on: position n - 1, the head's own output at n - 2 (the catch-up kept its row n - 2) and a proposal
  const proposal = 123;
  const next = buildForwardBatch([{ tokenIds: [proposal], startPosition: n - 1, blockTable, sample: true }], 16);
  next.carryRows = Int32Array.from([n - 2]);
  const handNext = handHead([...prompt.slice(1), proposal], [...hidden.slice(0, n - 1), hand.out[n - 2]!]);
  assertClose(model.mtpLogits(next), handNext.logits[n - 1]!, 'the recurrent step');
  // mtpTokens: the argmax of those logits (the sampled row's: position n - 2), after the target's forward again
  model.forward(buildForwardBatch([{ tokenIds: prompt, startPosition: 0, blockTable, sample: true, stateSlot: 0 }], 16));
  const argmax = (xs: number[]) => xs.indexOf(Math.max(...xs));
  assert.deepEqual([...model.mtpTokens({ ...catchUp, logitsIndices: Int32Array.from([n - 2]) })], [argmax(hand.logits[n - 2]!)]);
});

test('loading the head is asked for: without LoadOptions.mtp no head, no carry, no extra KV layer; a model of no hybrid family has none', () => {
  const plain = Model.load(config, source, backend);
  assert.equal(plain.hasMtp, false);
  assert.equal(plain.kvCacheSpec(8, 16).numLayers, 2);
  assert.throws(() => plain.allocateMtpCarry(8), /no MTP head/);
  const dense = { ...parseModelConfig(testModelShapes()['tiny-qwen3'], 'c'), dtype: 'f32' as const };
  assert.throws(() => Model.load(dense, randomWeightSource(dense), backend, { mtp: true }), /qwen3 has no multi-token-prediction head/);
  const bare = randomWeightSource(config, { overrides: { 'mtp.norm.weight': null } });
  assert.throws(() => Model.load(config, bare, backend, { mtp: true }), /missing tensor mtp\.norm\.weight/);
});
