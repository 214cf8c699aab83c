import { test, after } from 'node:test';
import { CpuBackend } from '../../src/backend/cpu/cpu-backend.js';
import { bytesToF32 } from '../../src/loader/dtype.js';
import type { ModelConfig, WeightSource } from '../../src/loader/types.js';
import { Model } from '../../src/model/model.js';
import { randomWeightSource, seededRandom, tinyConfig } from '../../src/model/random-weights.js';
import { ropeAttentionFactor, ropeInvFreq, rotateHalf } from '../../src/model/rope.js';
import { assertClose } from '../backend/helpers.js';
import { runSteps } from './helpers.js';

const backends = { js: new CpuBackend({ kvCacheBytes: 1 << 24, numThreads: 1, kernel: 'js' }),
  wasm: new CpuBackend({ kvCacheBytes: 1 << 24, numThreads: 1, kernel: 'wasm' }) };
after(() => Object.values(backends).forEach((b) => b.dispose()));

/** y[n] = sum_k x[k] w[n, k] (+ b[n]) */
const linear = (x: number[], w: Float32Array, b: Float32Array | null = null): number[] => {
  const K = x.length;
  return Array.from({ length: w.length / K }, (_, n) => x.reduce((s, v, k) => s + v * w[n * K + k]!, b ? b[n]! : 0));
};
const rms = (x: number[], w: Float32Array, eps: number): number[] => {
  const inv = 1 / Math.sqrt(x.reduce((s, v) => s + v * v, 0) / x.length + eps);
  return x.map((v, i) => v * inv * w[i]!);
};
const heads = (x: number[], D: number): number[][] =>
  Array.from({ length: x.length / D }, (_, h) => x.slice(h * D, (h + 1) * D));

/** Dense, unpaged, double-precision forward over the unfused Hugging Face weights: logits of every position. */
function referenceLogits(c: ModelConfig, src: WeightSource, ids: number[]): number[][] {
  const W = (name: string): Float32Array => bytesToF32(c.dtype, src.read(name).data);
  const H = c.hiddenSize;
  const D = c.headDim;
  const invFreq = ropeInvFreq(c);
  const embed = W('model.embed_tokens.weight');
  let x = ids.map((id) => Array.from(embed.subarray(id * H, (id + 1) * H)));
  for (let l = 0; l < c.numLayers; l++) {
    const p = `model.layers.${l}.`;
    const rope = (hs: number[][], pos: number, norm: Float32Array | null): number[][] =>
      hs.map((h) => [...rotateHalf(Float32Array.from(norm ? rms(h, norm, c.rmsNormEps) : h), pos, invFreq)]
        .map((v) => v * ropeAttentionFactor(c)));
    const qn = c.qkNorm ? W(`${p}self_attn.q_norm.weight`) : null;
    const kn = c.qkNorm ? W(`${p}self_attn.k_norm.weight`) : null;
    const hIn = x.map((r) => rms(r, W(`${p}input_layernorm.weight`), c.rmsNormEps));
    const bias = (proj: string, on: boolean): Float32Array | null => on ? W(`${p}self_attn.${proj}.bias`) : null;
    const proj = (r: number[], name: string): number[] => linear(r, W(`${p}self_attn.${name}.weight`), bias(name, c.qkvBias));
    const q = hIn.map((r, pos) => rope(heads(proj(r, 'q_proj'), D), pos, qn));
    const k = hIn.map((r, pos) => rope(heads(proj(r, 'k_proj'), D), pos, kn));
    const v = hIn.map((r) => heads(proj(r, 'v_proj'), D));
    const attn = q.map((qh, pos) => qh.flatMap((qv, h) => {
      const kvh = Math.floor(h / (c.numHeads / c.numKvHeads));
      const s = k.slice(0, pos + 1).map((kr) => qv.reduce((a, b, d) => a + b * kr[kvh]![d]!, 0) / Math.sqrt(D));
      const m = Math.max(...s);
      const e = s.map((z) => Math.exp(z - m));
      const sum = e.reduce((a, b) => a + b, 0);
      return Array.from({ length: D }, (_, d) => e.reduce((a, ej, j) => a + ej * v[j]![kvh]![d]!, 0) / sum);
    }));
    x = x.map((r, pos) => linear(attn[pos]!, W(`${p}self_attn.o_proj.weight`), bias('o_proj', c.oBias))
      .map((o, i) => o + r[i]!));
    x = x.map((r) => {
      const h = rms(r, W(`${p}post_attention_layernorm.weight`), c.rmsNormEps);
      const g = linear(h, W(`${p}mlp.gate_proj.weight`));
      const u = linear(h, W(`${p}mlp.up_proj.weight`));
      const d = linear(g.map((gv, i) => (gv / (1 + Math.exp(-gv))) * u[i]!), W(`${p}mlp.down_proj.weight`));
      return d.map((dv, i) => dv + r[i]!);
    });
  }
  const head = W(c.tieWordEmbeddings ? 'model.embed_tokens.weight' : 'lm_head.weight');
  return x.map((r) => linear(rms(r, W('model.norm.weight'), c.rmsNormEps), head));
}

const configs = [tinyConfig('qwen3'), tinyConfig('llama'), tinyConfig('qwen2'),
  tinyConfig('llama', { qkvBias: true, oBias: true }),
  tinyConfig('qwen3', { ropeScaling: { type: 'yarn', factor: 4, originalMaxPositionEmbeddings: 64, betaFast: 32, betaSlow: 1,
    attentionFactor: 1.25, truncate: true } })];
for (const [config, kernel] of configs.flatMap((c) => (['js', 'wasm'] as const).map((k) => [c, k] as const))) {
  const name = `${config.architecture}${config.oBias ? ' with attention biases' : ''}${config.ropeScaling?.type === 'yarn' ? ' with yarn' : ''}`;
  test(`${name}, ${kernel} kernel: forward matches a dense double-precision reference`, () => {
    const backend = backends[kernel];
    const src = randomWeightSource(config, { seed: 3 });
    const model = Model.load(config, src, backend);
    const rand = seededRandom(11);
    const ids = Array.from({ length: 20 }, () => Math.floor(rand() * config.vocabSize));
    const logits = runSteps(model, { a: ids }, [[{ seq: 'a', start: 0, end: 12 }], [{ seq: 'a', start: 12, end: 20 }]], 9).get('a')!;
    const expected = referenceLogits(config, src, ids);
    logits.forEach((row, pos) => assertClose(row, expected[pos]!, 2e-4, `${config.architecture} pos ${pos}`));
  });
}
