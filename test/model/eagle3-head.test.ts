// The EAGLE-3 head (model/eagle3-head.ts) on the CPU backend against a hand computation of vLLM's formula
// (llama_eagle3.py's LlamaDecoderLayer at layer 0, LlamaModel.forward and Eagle3LlamaForCausalLM.compute_logits), in
// plain f64 loops over the checkpoints' tensors, one position at a time, in the test alone (no Quire op or layer; the
// rotary frequencies are ropeInvFreq's, held to transformers by rope.test.ts):
//
//   h = fc [a_0 | a_1 | a_2]  (a chained step: the head's prenorm output at the position before)
//   e = rmsnorm(embed(x_{t+1})) w_in; hn = rmsnorm(h) w_hidden; r = h (norm_before_residual: hn)
//   q, k, v = W [e | hn]; RoPE (half split) at t; causal attention over the head's own k, v; r += o(attn)
//   r += down(silu(gate m) * up m), m = rmsnorm(r) w_post; out = rmsnorm(r) w_norm; logits = lm_head out (draft vocab)
//
// a_i, the residual stream entering the target's layer auxLayers[i], is read from the carry the target's forward
// filled; that it is that stream is checked on its own: rmsnorm of it equals the final hidden state of the target cut
// to its first auxLayers[i] layers with a final norm of ones (and, for layer 0, is the embedding row itself).

import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CpuBackend } from '../../src/backend/cpu/cpu-backend.js';
import type { ForwardBatch } from '../../src/backend/batch.js';
import { buildForwardBatch } from '../../src/engine/batch-builder.js';
import { bytesToF32 } from '../../src/loader/dtype.js';
import { loadEagle3HeadDir, type Eagle3HeadDir } from '../../src/loader/eagle3-head.js';
import { loadModelDir, type ModelDir } from '../../src/loader/model-dir.js';
import type { HostTensor, WeightSource } from '../../src/loader/types.js';
import { eagle3Refusal } from '../../src/model/architectures/eagle3-weights.js';
import { Model } from '../../src/model/model.js';
import { ropeInvFreq } from '../../src/model/rope.js';
import { makeTestModel } from '../../src/tools/make-test-model.js';
import { makeTestEagle3Head } from '../../src/tools/test-model/eagle3.js';
import { editHead } from '../engine/eagle3-helpers.js';

const backend = new CpuBackend({ kvCacheBytes: 1 << 24, numThreads: 1, kernel: 'js' });
let tmp = '';
let target: ModelDir;
const heads: Record<'draft' | 'own', string> = { draft: '', own: '' };
before(async () => {
  tmp = mkdtempSync(join(tmpdir(), 'quire-eagle3-head-'));
  await makeTestModel({ shape: 'tiny-llama-8l', outDir: join(tmp, 'target'), dtype: 'f32', seed: 5 });
  target = loadModelDir(join(tmp, 'target'));
  // a smaller draft vocabulary (d2t), its own lm_head, the target's embedding; the layers it reads named
  heads.draft = join(tmp, 'draft');
  makeTestEagle3Head({ target: join(tmp, 'target'), outDir: heads.draft, seed: 6, draftVocabSize: 300, auxLayerIds: [0, 3, 6], linearStd: 0.2 });
  // the target's vocabulary and lm_head, its own embedding, norm_before_residual, vLLM's default layers (2, 4, 5)
  heads.own = join(tmp, 'own');
  makeTestEagle3Head({ target: join(tmp, 'target'), outDir: heads.own, seed: 7, embedTokens: true, lmHead: false,
    normBeforeResidual: true, linearStd: 0.2 });
});
after(() => {
  backend.dispose();
  rmSync(tmp, { recursive: true, force: true });
});

const f64 = (t: HostTensor): number[] => [...bytesToF32(t.dtype, t.data)];
function matvec(W: number[], cols: number, x: number[]): number[] {
  return Array.from({ length: W.length / cols }, (_, r) => x.reduce((a, v, j) => a + W[r * cols + j]! * v, 0));
}
function rmsnorm(x: number[], g: number[] | null, eps: number): number[] {
  const inv = 1 / Math.sqrt(x.reduce((a, v) => a + v * v, 0) / x.length + eps);
  return x.map((v, i) => v * inv * (g ? g[i]! : 1));
}
const add = (a: number[], b: number[]): number[] => a.map((v, i) => v + b[i]!);
const silu = (v: number): number => v / (1 + Math.exp(-v));

/** The head by hand over positions start.., keeping its own k and v in `kv` across calls; each position's logits and prenorm. */
function handHead(head: Eagle3HeadDir, kv: { keys: number[][][]; values: number[][][] }, tokens: number[], hs: number[][],
  fromTarget: boolean, start: number): { logits: number[][]; prenorm: number[][] } {
  const c = head.config;
  const [H, nh, nkv, D, eps] = [c.hiddenSize, c.numHeads, c.numKvHeads, c.headDim, c.rmsNormEps];
  const get = (n: string): number[] => f64(head.weights.read(n));
  const p = 'midlayer.';
  const embed = head.weights.has('embed_tokens.weight') ? get('embed_tokens.weight') : f64(target.weights.read('model.embed_tokens.weight'));
  const lmHead = head.weights.has('lm_head.weight') ? get('lm_head.weight') : f64(target.weights.read('lm_head.weight'));
  const inv = ropeInvFreq(c);
  const rope = (x: number[], pos: number): number[] => {
    const y = [...x];
    for (let i = 0; i < D / 2; i++) {
      const [cos, sin] = [Math.cos(pos * inv[i]!), Math.sin(pos * inv[i]!)];
      y[i] = x[i]! * cos - x[i + D / 2]! * sin;
      y[i + D / 2] = x[i + D / 2]! * cos + x[i]! * sin;
    }
    return y;
  };
  const logits: number[][] = [];
  const prenorm: number[][] = [];
  tokens.forEach((token, i) => {
    const t = start + i;
    const h = fromTarget ? matvec(get('fc.weight'), 3 * H, hs[i]!) : hs[i]!;
    const e = rmsnorm(embed.slice(token * H, (token + 1) * H), get(`${p}input_layernorm.weight`), eps);
    const hn = rmsnorm(h, get(`${p}hidden_norm.weight`), eps);
    let r = head.normBeforeResidual ? hn : h;
    const x = [...e, ...hn];
    const [q, k, v] = ['q_proj', 'k_proj', 'v_proj'].map((n) => matvec(get(`${p}self_attn.${n}.weight`), 2 * H, x)) as [number[], number[], number[]];
    kv.keys[t] = Array.from({ length: nkv }, (_, g) => rope(k.slice(g * D, (g + 1) * D), t));
    kv.values[t] = Array.from({ length: nkv }, (_, g) => v.slice(g * D, (g + 1) * D));
    const attn: number[] = [];
    for (let head = 0; head < nh; head++) {
      const qh = rope(q.slice(head * D, (head + 1) * D), t);
      const g = Math.floor(head / (nh / nkv));
      const scores = kv.keys.slice(0, t + 1).map((ks) => ks[g]!.reduce((a, kk, j) => a + kk * qh[j]!, 0) / Math.sqrt(D));
      const max = Math.max(...scores);
      const ws = scores.map((s) => Math.exp(s - max));
      const sum = ws.reduce((a, b) => a + b, 0);
      for (let j = 0; j < D; j++) attn.push(ws.reduce((a, w, s) => a + w * kv.values[s]![g]![j]!, 0) / sum);
    }
    r = add(r, matvec(get(`${p}self_attn.o_proj.weight`), nh * D, attn));
    const m = rmsnorm(r, get(`${p}post_attention_layernorm.weight`), eps);
    const [gt, up] = [matvec(get(`${p}mlp.gate_proj.weight`), H, m), matvec(get(`${p}mlp.up_proj.weight`), H, m)];
    r = add(r, matvec(get(`${p}mlp.down_proj.weight`), gt.length, gt.map((g, j) => silu(g) * up[j]!)));
    prenorm.push(r);
    logits.push(matvec(lmHead, H, rmsnorm(r, get('norm.weight'), eps)));
  });
  return { logits, prenorm };
}

function assertClose(actual: Float32Array, expected: number[], what: string): void {
  const scale = Math.max(1, ...expected.map(Math.abs));
  const worst = expected.reduce((w, v, i) => Math.max(w, Math.abs(actual[i]! - v)), 0);
  assert.ok(worst < 1e-4 * scale, `${what}: off by ${worst} (logits up to ${scale})`);
}

const allRows = (b: ForwardBatch): ForwardBatch => ({ ...b, logitsIndices: Int32Array.from({ length: b.numTokens }, (_, t) => t) });
const PROMPT = [17, 300, 4, 4, 91, 250, 6, 77, 130, 2, 45, 300, 18, 9, 211, 64, 5, 33];
const BLOCKS = [3, 5];

/** The carry's part `part` at rows 0 .. n - 1, as the host sees it (what the last forward kept there). */
function carried(n: number, part: number): number[][] {
  const step = backend.beginStep({ ...buildForwardBatch([{ tokenIds: new Array<number>(n).fill(0), startPosition: 0, blockTable: BLOCKS, sample: false }], 16),
    carryRows: Int32Array.from({ length: n }, (_, t) => t) });
  const rows = backend.toHost(backend.carry.rows(step, part));
  const H = target.config.hiddenSize;
  return Array.from({ length: n }, (_, t) => [...rows.subarray(t * H, (t + 1) * H)]);
}

for (const which of ['draft', 'own'] as const) {
  test(`the head computes vLLM's formula (${which === 'draft' ? 'a draft vocabulary of 300 and d2t' : 'norm_before_residual, its own embedding, the target\'s lm_head'}): catch-up, then a chained step`, () => {
    const head = loadEagle3HeadDir(heads[which]);
    const model = Model.load(target.config, target.weights, backend, { eagle3: head });
    assert.equal(model.kvCacheSpec(8, 16).numLayers, 9, 'the head\'s K and V: one more KV layer after the target\'s 8');
    model.allocateEagle3Carry(64);
    backend.allocateKvCache(model.kvCacheSpec(8, 16));
    const n = PROMPT.length;
    model.forward(buildForwardBatch([{ tokenIds: PROMPT, startPosition: 0, blockTable: BLOCKS, sample: true }], 16));
    const aux = [0, 1, 2].map((part) => carried(n, part));
    const hs = Array.from({ length: n - 1 }, (_, t) => [...aux[0]![t]!, ...aux[1]![t]!, ...aux[2]![t]!]);
    const kv = { keys: [] as number[][][], values: [] as number[][][] };
    const hand = handHead(head, kv, PROMPT.slice(1), hs, true, 0);
    const catchUp = { ...buildForwardBatch([{ tokenIds: PROMPT.slice(1), startPosition: 0, blockTable: BLOCKS, sample: true }], 16),
      carryRows: Int32Array.from({ length: n - 1 }, (_, t) => t) };
    const V = head.draftVocabSize;
    const logits = model.eagle3Logits(allRows(catchUp), 'target');
    for (let t = 0; t < n - 1; t++) assertClose(logits.subarray(t * V, (t + 1) * V), hand.logits[t]!, `position ${t}`);
    // chained: position n - 1 on a proposal and the head's prenorm output at n - 2 (kept in part 0 at row n - 2)
    const proposal = 123;
    const next = { ...buildForwardBatch([{ tokenIds: [proposal], startPosition: n - 1, blockTable: BLOCKS, sample: true }], 16),
      carryRows: Int32Array.from([n - 2]) };
    const handNext = handHead(head, kv, [proposal], [hand.prenorm[n - 2]!], false, n - 1);
    assertClose(model.eagle3Logits(next, 'head'), handNext.logits[0]!, 'the chained step');
    // eagle3Tokens: the argmax draft id, as a target id (d2t); after the target's forward again (the carry is its)
    model.forward(buildForwardBatch([{ tokenIds: PROMPT, startPosition: 0, blockTable: BLOCKS, sample: true }], 16));
    const best = hand.logits[n - 2]!.indexOf(Math.max(...hand.logits[n - 2]!));
    const expected = head.draftToTarget ? head.draftToTarget[best]! : best;
    assert.deepEqual([...model.eagle3Tokens(catchUp, 'target')], [expected]);
    if (which === 'draft') assert.ok(head.draftToTarget![299]! > 299, 'd2t maps the draft ids above themselves');
  });
}

test('the target keeps the residual stream entering each of the head\'s layers: the embedding at layer 0, a cut model\'s stream further on', () => {
  const head = loadEagle3HeadDir(heads.draft);
  const model = Model.load(target.config, target.weights, backend, { eagle3: head });
  model.allocateEagle3Carry(64);
  backend.allocateKvCache(model.kvCacheSpec(8, 16));
  const n = PROMPT.length;
  model.forward(buildForwardBatch([{ tokenIds: PROMPT, startPosition: 0, blockTable: BLOCKS, sample: true }], 16));
  const aux = [0, 1, 2].map((part) => carried(n, part));
  const H = target.config.hiddenSize;
  const embed = f64(target.weights.read('model.embed_tokens.weight'));
  PROMPT.forEach((tok, t) => assertClose(Float32Array.from(aux[0]![t]!), embed.slice(tok * H, (tok + 1) * H), `layer 0, position ${t}`));
  for (const [part, layers] of [[1, 3], [2, 6]] as const) {
    // the first `layers` layers, their final norm ones: its final hidden state is rmsnorm(the stream entering `layers`)
    const ones: WeightSource = { ...target.weights, names: () => target.weights.names(), has: (nm) => target.weights.has(nm),
      info: (nm) => target.weights.info(nm),
      read: (nm) => nm !== 'model.norm.weight' ? target.weights.read(nm)
        : { name: nm, dtype: 'f32', shape: [H], data: new Uint8Array(new Float32Array(H).fill(1).buffer) } };
    const cut = Model.load({ ...target.config, numLayers: layers }, ones, backend);
    backend.allocateKvCache(cut.kvCacheSpec(8, 16));
    cut.forward(allRows(buildForwardBatch([{ tokenIds: PROMPT, startPosition: 0, blockTable: BLOCKS, sample: true }], 16)));
    const hidden = cut.hiddenRows(Array.from({ length: n }, (_, t) => t));
    for (let t = 0; t < n; t++) {
      assertClose(hidden.subarray(t * H, (t + 1) * H), rmsnorm(aux[part]![t]!, null, target.config.rmsNormEps), `layer ${layers}, position ${t}`);
    }
  }
});

test('a head that does not fit is refused naming the field or tensor; its directory\'s faults name the file and field', () => {
  const head = loadEagle3HeadDir(heads.draft);
  const c = target.config;
  assert.match(eagle3Refusal(head, { ...c, hiddenSize: 128 }) ?? '', /hidden_size is 64, the target's 128/);
  assert.match(eagle3Refusal(head, { ...c, vocabSize: 1024 }) ?? '', /vocab_size is 512, the target's 1024/);
  assert.match(eagle3Refusal(head, { ...c, numKvHeads: 4 }) ?? '', /2 KV heads of 16, the target's 4 of 16/);
  assert.match(eagle3Refusal(head, { ...c, numLayers: 5 }) ?? '', /eagle_aux_hidden_state_layer_ids \(0, 3, 6\) name layers outside the target's 5/);
  assert.match(eagle3Refusal(loadEagle3HeadDir(heads.own), { ...c, numLayers: 2 }) ?? '',
    /vLLM's default eagle_aux_hidden_state_layer_ids \(2, 1, -1\) name layers outside the target's 2/);
  assert.match(eagle3Refusal(loadEagle3HeadDir(heads.own), { ...c, numLayers: 4 }) ?? '', /\(2, 2, 1\) name a layer twice/);
  assert.equal(eagle3Refusal(head, c), null);
  const broken = join(tmp, 'broken');
  makeTestEagle3Head({ target: join(tmp, 'target'), outDir: broken, seed: 1, draftVocabSize: 300 });
  editHead(broken, (name) => name !== 'midlayer.hidden_norm.weight');
  assert.match(eagle3Refusal(loadEagle3HeadDir(broken), c) ?? '', /missing tensor midlayer\.hidden_norm\.weight \(expected f32 \[64\]\)/);
  editHead(broken, (name) => name !== 'lm_head.weight');
  assert.match(eagle3Refusal(loadEagle3HeadDir(broken), c) ?? '', /no lm_head\.weight and draft_vocab_size \(300\)/);
  const config = JSON.parse(readFileSync(join(broken, 'config.json'), 'utf8')) as Record<string, unknown>;
  const rewrite = (fields: Record<string, unknown>) => writeFileSync(join(broken, 'config.json'), JSON.stringify({ ...config, ...fields }));
  const cases: [Record<string, unknown>, RegExp][] = [
    [{ architectures: ['LlamaForCausalLM'] }, /config\.json: architectures is \["LlamaForCausalLM"\]; an EAGLE-3 head's is LlamaForCausalLMEagle3 or Eagle3LlamaForCausalLM/],
    [{ num_hidden_layers: 2 }, /num_hidden_layers is 2; Quire runs EAGLE-3 heads of one layer/],
    [{ draft_vocab_size: 600 }, /draft_vocab_size is 600; expected a positive integer up to vocab_size \(512\)/],
    [{ eagle_config: { eagle_aux_hidden_state_layer_ids: [1, 2] } }, /eagle_config\.eagle_aux_hidden_state_layer_ids is \[1,2\]; expected three/],
    [{ eagle_config: { use_aux_hidden_state: false } }, /use_aux_hidden_state is false/],
    [{ target_hidden_size: 128 }, /target_hidden_size \(128\) differs from hidden_size \(64\)/],
    [{ attention_bias: true }, /attention_bias is true/],
    [{ norm_before_residual: 'yes' }, /norm_before_residual is "yes"/],
  ];
  for (const [fields, why] of cases) {
    rewrite(fields);
    assert.throws(() => loadEagle3HeadDir(broken), why);
  }
  rewrite({ draft_vocab_size: 200 });
  assert.throws(() => loadEagle3HeadDir(broken), /model\.safetensors: tensor d2t is I64 \[300\], expected I64 \[200\]/);
  rmSync(join(broken, 'model.safetensors'));
  writeFileSync(join(broken, 'pytorch_model.bin'), '');
  assert.throws(() => loadEagle3HeadDir(broken), /model\.safetensors: not found in .* \(it has pytorch_model\.bin: Quire reads safetensors/);
  assert.throws(() => loadEagle3HeadDir(join(tmp, 'nowhere')), /config\.json: not found/);
});
