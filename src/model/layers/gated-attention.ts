// Output-gated paged attention (Qwen3.5, Qwen3-Next): attention as layers/attention.ts computes it (its qk RMSNorm,
// RoPE over the first rotary channels of each head only), its output multiplied by sigmoid of a gate projected
// from the same input, then o, left to the layer (fused with the norm after it).

import type { Tensor } from '../../backend/backend.js';
import type { AttentionShape } from './attention.js';
import type { LayerContext, LayerStateSpec, Linear, Mixer, SublayerOut, WeightRead } from './types.js';

export interface GatedAttentionWeights {
  qkv: Tensor;
  /** [numHeads * headDim, hidden]: the gate of each output channel. */
  gate: Tensor;
  qNorm: Tensor;
  kNorm: Tensor;
  o: Linear;
}

export class GatedAttention implements Mixer {
  /** `kvLayer`: this layer's index among the model's attention layers (its pages in the KV cache). */
  constructor(private readonly shape: AttentionShape, readonly w: GatedAttentionWeights, private readonly kvLayer: number) {}

  forward(x: Tensor, ctx: LayerContext): SublayerOut {
    const { backend: b, step, eps } = ctx;
    const { numHeads, numKvHeads, scale, rope } = this.shape;
    const qkv = b.matmul(x, this.w.qkv, 'qkv');
    const gate = b.matmul(x, this.w.gate, 'gate');
    b.qkNormRope(qkv, this.w.qNorm, this.w.kNorm, eps, numHeads, numKvHeads, rope, step, this.kvLayer);
    const attn = b.attention(qkv, this.kvLayer, numHeads, numKvHeads, scale, step);
    return { input: b.sigmoidMul(attn, gate), proj: this.w.o, label: 'o' };
  }

  stateSpec(): LayerStateSpec {
    return { kind: 'full_attention', numKvHeads: this.shape.numKvHeads, headDim: this.shape.headDim };
  }

  weightsRead(): WeightRead[] {
    return [this.w.qkv, this.w.gate, this.w.qNorm, this.w.kNorm, this.w.o.weight];
  }
}
