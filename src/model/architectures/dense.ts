// The decoder families of attention layers: Qwen3, Qwen2 (and Qwen2.5, the R1 Qwen distills), Llama 3.x, Mistral and
// Phi-3, and the mixtures of experts built on them, Qwen3-MoE and Mixtral. Each layer is attention (q, k, v fused,
// optional qkv/o biases and Qwen3's qk-norm) and a SwiGLU MLP, or on a sparse layer of a MoE config a router and its
// experts (layers/moe.ts); they differ only in config fields that loader/config.ts reads (ModelConfig) and in
// checkpoint names (dense-weights.ts, moe-weights.ts).

import type { Backend } from '../../backend/backend.js';
import type { ModelConfig, WeightSource } from '../../loader/types.js';
import { Attention, type AttentionShape } from '../layers/attention.js';
import { DecoderLayer } from '../layers/decoder-layer.js';
import { DenseMlp } from '../layers/mlp.js';
import { SparseMoe } from '../layers/moe.js';
import type { FeedForward } from '../layers/types.js';
import { ropeAttentionFactor, ropeInvFreq } from '../rope.js';
import { loadWeights } from './dense-weights.js';
import type { LoadOptions } from '../load-options.js';
import type { ModelParts } from '../model.js';

/** Attention's shape for `config`: rotary over the whole head, YaRN's attention factor folded into the scale. */
export function attentionShape(config: ModelConfig): AttentionShape {
  return {
    numHeads: config.numHeads, numKvHeads: config.numKvHeads, headDim: config.headDim,
    // YaRN scales the rotated q and k by its attention factor: the scores by its square, folded in here
    scale: ropeAttentionFactor(config) ** 2 / Math.sqrt(config.headDim),
    rope: { headDim: config.headDim, invFreq: ropeInvFreq(config) },
  };
}

export function buildDecoder(config: ModelConfig, source: WeightSource, backend: Backend, opts: LoadOptions): ModelParts {
  const w = loadWeights(config, source, backend, opts);
  const shape = attentionShape(config);
  const moe = config.moe;
  const feedForward = (lw: (typeof w.layers)[number]): FeedForward => {
    if (!lw.experts) return new DenseMlp(lw.gateUp!, { weight: lw.down!, bias: null });
    const { router, gateUp, down } = lw.experts;
    return new SparseMoe(router, { numExperts: moe!.numExperts, intermediate: moe!.expertIntermediateSize, gateUp, down,
      ...(moe!.localExperts ? { local: moe!.localExperts } : {}) },
      { topK: moe!.topK, renormalize: moe!.renormalize });
  };
  const layers = w.layers.map((lw, l) => new DecoderLayer(lw.inputNorm,
    new Attention(shape, { qkv: { weight: lw.qkv, bias: lw.qkvBias }, qNorm: lw.qNorm, kNorm: lw.kNorm,
      o: { weight: lw.o, bias: lw.oBias } }, l),
    lw.postAttentionNorm,
    feedForward(lw)));
  return { embedTokens: w.embedTokens, layers, finalNorm: w.finalNorm, lmHead: w.lmHead };
}
