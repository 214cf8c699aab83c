// Paged causal attention as a token mixer: qkv (+ bias) -> per-head qk RMSNorm (Qwen3) and RoPE, this step's k and
// v written to the layer's KV pages -> GQA attention -> o, left to the layer (fused with the norm after it).

import type { RopeSpec, Tensor } from '../../backend/backend.js';
import type { LayerContext, LayerStateSpec, Linear, Mixer, SublayerOut, WeightRead } from './types.js';

export interface AttentionShape {
  numHeads: number;
  numKvHeads: number;
  headDim: number;
  /** Scores' scale (1 / sqrt(headDim), times YaRN's attention factor squared). */
  scale: number;
  rope: RopeSpec;
}

export interface AttentionWeights {
  qkv: Linear;
  qNorm: Tensor | null;
  kNorm: Tensor | null;
  o: Linear;
}

export class Attention implements Mixer {
  /** `kvLayer`: this layer's index among the model's attention layers (its pages in the KV cache). */
  constructor(private readonly shape: AttentionShape, readonly w: AttentionWeights, private readonly kvLayer: number) {}

  forward(x: Tensor, ctx: LayerContext): SublayerOut {
    const { backend: b, step, eps } = ctx;
    const { numHeads, numKvHeads, scale, rope } = this.shape;
    const qkv = b.matmul(x, this.w.qkv.weight, 'qkv', this.w.qkv.bias);
    b.qkNormRope(qkv, this.w.qNorm, this.w.kNorm, eps, numHeads, numKvHeads, rope, step, this.kvLayer);
    const attn = b.attention(qkv, this.kvLayer, numHeads, numKvHeads, scale, step);
    return { input: attn, proj: this.w.o, label: 'o' };
  }

  stateSpec(): LayerStateSpec {
    return { kind: 'full_attention', numKvHeads: this.shape.numKvHeads, headDim: this.shape.headDim };
  }

  weightsRead(): WeightRead[] {
    return [this.w.qkv.weight, this.w.qNorm, this.w.kNorm, this.w.o.weight];
  }
}
