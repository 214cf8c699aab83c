// The hybrid text models: Qwen3.5 / Qwen3.6 (transformers' Qwen3_5TextModel), their mixture-of-experts variant
// (Qwen3_5MoeTextModel) and Qwen3-Next (Qwen3NextModel). Each is a hybrid of gated DeltaNet layers (linear
// attention, a fixed-size state per sequence) and output-gated full-attention layers, as layer_types says (three to
// one in the published models), each followed by a SwiGLU MLP (Qwen3.5; Qwen3-Next's mlp_only_layers) or a mixture of
// experts with a shared expert (Qwen3.5-MoE's every layer, Qwen3-Next's sparse ones). Their RMSNorms scale by (1 + w)
// (the weights are loaded as 1 + w: qwen3_5-weights.ts), their RoPE turns the first rotary channels of each head only.
// They differ in checkpoint layout alone (qwen3_5-weights.ts), so one builder makes all three. With LoadOptions.mtp it
// also builds the checkpoint's multi-token-prediction head (qwen3_5-mtp-weights.ts, ../mtp-head.ts): one more
// decoder layer of the same kinds, its attention on the KV cache layer after the model's own.

import type { Backend } from '../../backend/backend.js';
import type { ModelConfig, WeightSource } from '../../loader/types.js';
import { DecoderLayer } from '../layers/decoder-layer.js';
import { GatedAttention } from '../layers/gated-attention.js';
import { GatedDeltaNet } from '../layers/deltanet.js';
import { DenseMlp } from '../layers/mlp.js';
import { SparseMoe } from '../layers/moe.js';
import type { FeedForward, Mixer } from '../layers/types.js';
import { defaultInvFreq } from '../rope.js';
import type { LoadOptions } from '../load-options.js';
import type { ModelParts } from '../model.js';
import { MtpHead } from '../mtp-head.js';
import { loadQwen35Weights, type Qwen35AttentionWeights } from './qwen3_5-weights.js';
import type { HybridFeedForwardWeights } from './hybrid-moe-weights.js';
import { loadMtpHeadWeights } from './qwen3_5-mtp-weights.js';

export function buildQwen35(config: ModelConfig, source: WeightSource, backend: Backend, opts: LoadOptions): ModelParts {
  const h = config.hybrid;
  if (!h) throw new Error('buildQwen35: config has no hybrid fields');
  if (opts.quantization) throw new Error(`--quantization fp8 is not supported for ${config.architecture} yet`);
  const w = loadQwen35Weights(config, source, backend, opts.mtp === true);
  // transformers: inv_freq over the rotary dimension (head_dim x partial_rotary_factor), not the head's
  const rope = { headDim: config.headDim, invFreq: defaultInvFreq(h.rotaryDim, config.ropeTheta) };
  const attention = { numHeads: config.numHeads, numKvHeads: config.numKvHeads, headDim: config.headDim,
    scale: 1 / Math.sqrt(config.headDim), rope };
  const deltaNet = { numKeyHeads: h.linearNumKeyHeads, numValueHeads: h.linearNumValueHeads, keyDim: h.linearKeyHeadDim,
    valueDim: h.linearValueHeadDim, convKernel: h.linearConvKernel };
  const feedForward = (lw: HybridFeedForwardWeights): FeedForward => {
    if (lw.moe === null) return new DenseMlp(lw.gateUp, { weight: lw.down, bias: null });
    const moe = config.moe!;
    return new SparseMoe(lw.moe.router, { numExperts: moe.numExperts, intermediate: moe.expertIntermediateSize,
      gateUp: lw.moe.gateUp, down: lw.moe.down, ...(moe.localExperts ? { local: moe.localExperts } : {}) },
    { topK: moe.topK, renormalize: moe.renormalize }, lw.moe.shared);
  };
  const gatedAttention = (a: Qwen35AttentionWeights, kvLayer: number) => new GatedAttention(attention, { qkv: a.qkv,
    gate: a.gate, qNorm: a.qNorm, kNorm: a.kNorm, o: { weight: a.o, bias: null } }, kvLayer);
  let numAttention = 0;
  let numRecurrent = 0;
  const layers = w.layers.map((lw) => {
    let mixer: Mixer;
    if (lw.attention) {
      mixer = gatedAttention(lw.attention, numAttention++);
    } else {
      const d = lw.deltaNet!;
      mixer = new GatedDeltaNet(deltaNet, { ...d, outProj: { weight: d.outProj, bias: null } }, numRecurrent++);
    }
    return new DecoderLayer(lw.inputNorm, mixer, lw.postAttentionNorm, feedForward(lw));
  });
  const parts: ModelParts = { embedTokens: w.embedTokens, layers, finalNorm: w.finalNorm, lmHead: w.lmHead };
  if (!opts.mtp) return parts;
  const m = loadMtpHeadWeights(config, source, backend);
  const layer = new DecoderLayer(m.inputNorm, gatedAttention(m.attention, numAttention), m.postAttentionNorm, feedForward(m));
  return { ...parts, mtp: new MtpHead({ preFcNormEmbedding: m.preFcNormEmbedding, preFcNormHidden: m.preFcNormHidden,
    fcEmbedding: m.fcEmbedding, fcHidden: m.fcHidden, layer, norm: m.norm }) };
}
