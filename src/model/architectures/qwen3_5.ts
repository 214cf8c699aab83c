// Qwen3.5 / Qwen3.6 dense text model (transformers' Qwen3_5TextModel): a hybrid of gated DeltaNet layers
// (linear attention, a fixed-size state per sequence) and output-gated full-attention layers, as layer_types says
// (three to one in the published models), each followed by a SwiGLU MLP. Its RMSNorms scale by (1 + w) (the
// weights are loaded as 1 + w: qwen3_5-weights.ts), its RoPE turns the first rotary channels of each head only.

import type { Backend } from '../../backend/backend.js';
import type { ModelConfig, WeightSource } from '../../loader/types.js';
import { DecoderLayer } from '../layers/decoder-layer.js';
import { GatedAttention } from '../layers/gated-attention.js';
import { GatedDeltaNet } from '../layers/deltanet.js';
import { DenseMlp } from '../layers/mlp.js';
import type { Mixer } from '../layers/types.js';
import { defaultInvFreq } from '../rope.js';
import type { LoadOptions } from '../load-options.js';
import type { ModelParts } from '../model.js';
import { loadQwen35Weights } from './qwen3_5-weights.js';

export function buildQwen35(config: ModelConfig, source: WeightSource, backend: Backend, opts: LoadOptions): ModelParts {
  const h = config.hybrid;
  if (!h) throw new Error('buildQwen35: config has no hybrid fields');
  if (opts.quantization) throw new Error('--quantization fp8 is not supported for Qwen3.5 yet');
  const w = loadQwen35Weights(config, source, backend);
  // transformers: inv_freq over the rotary dimension (head_dim x partial_rotary_factor), not the head's
  const rope = { headDim: config.headDim, invFreq: defaultInvFreq(h.rotaryDim, config.ropeTheta) };
  const attention = { numHeads: config.numHeads, numKvHeads: config.numKvHeads, headDim: config.headDim,
    scale: 1 / Math.sqrt(config.headDim), rope };
  const deltaNet = { numKeyHeads: h.linearNumKeyHeads, numValueHeads: h.linearNumValueHeads, keyDim: h.linearKeyHeadDim,
    valueDim: h.linearValueHeadDim, convKernel: h.linearConvKernel };
  let numAttention = 0;
  let numRecurrent = 0;
  const layers = w.layers.map((lw) => {
    let mixer: Mixer;
    if (lw.attention) {
      const a = lw.attention;
      mixer = new GatedAttention(attention, { qkv: a.qkv, gate: a.gate, qNorm: a.qNorm, kNorm: a.kNorm,
        o: { weight: a.o, bias: null } }, numAttention++);
    } else {
      const d = lw.deltaNet!;
      mixer = new GatedDeltaNet(deltaNet, { ...d, outProj: { weight: d.outProj, bias: null } }, numRecurrent++);
    }
    return new DecoderLayer(lw.inputNorm, mixer, lw.postAttentionNorm, new DenseMlp(lw.gateUp, { weight: lw.down, bias: null }));
  });
  return { embedTokens: w.embedTokens, layers, finalNorm: w.finalNorm, lmHead: w.lmHead };
}
