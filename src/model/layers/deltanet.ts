// The gated DeltaNet token mixer (Qwen3.5, Qwen3-Next's linear_attention layers), as transformers' GatedDeltaNet:
//
//   q | k | v = silu(causal depthwise conv1d(x in_proj_qkv^T))      per-sequence conv window (Backend.causalConv1d)
//   b | a = x in_proj_ba^T;  z = x in_proj_z^T
//   o = gated delta rule(q, k, v; beta = sigmoid(b), g = -exp(A_log) softplus(a + dt_bias))   per-sequence state
//   out = rmsnorm(o) * norm_w * silu(z) per v head, then out_proj, left to the layer (fused with the norm after it)
//
// Its state is a fixed size per sequence whatever the context: the conv window and Hv x Dk x Dv of the rule.

import type { DeltaNetShape, Tensor } from '../../backend/backend.js';
import type { LayerContext, LayerStateSpec, Linear, Mixer, SublayerOut, WeightRead } from './types.js';

export interface DeltaNetLayerWeights {
  inProjQkv: Tensor;
  inProjZ: Tensor;
  /** [2 Hv, hidden]: in_proj_b's rows, then in_proj_a's. */
  inProjBa: Tensor;
  /** [C, K] depthwise conv taps. */
  conv: Tensor;
  aLog: Tensor;
  dtBias: Tensor;
  /** [Dv]: the gated RMSNorm's weight (used as is: not a (1 + w) norm). */
  norm: Tensor;
  outProj: Linear;
}

export class GatedDeltaNet implements Mixer {
  /** `stateLayer`: this layer's index among the model's recurrent layers (its state in each sequence's slot). */
  constructor(private readonly shape: DeltaNetShape, readonly w: DeltaNetLayerWeights, private readonly stateLayer: number) {}

  forward(x: Tensor, ctx: LayerContext): SublayerOut {
    const { backend: b, step, eps } = ctx;
    const conv = b.causalConv1d(b.matmul(x, this.w.inProjQkv, 'in_proj_qkv'), this.w.conv, this.stateLayer, step);
    const ba = b.matmul(x, this.w.inProjBa, 'in_proj_ba');
    const core = b.gatedDeltaRule(conv, ba, this.w.aLog, this.w.dtBias, this.shape, this.stateLayer, step);
    const z = b.matmul(x, this.w.inProjZ, 'in_proj_z');
    return { input: b.rmsNormGated(core, z, this.w.norm, eps), proj: this.w.outProj, label: 'out_proj' };
  }

  stateSpec(): LayerStateSpec {
    return { kind: 'recurrent', shape: this.shape };
  }

  weightsRead(): WeightRead[] {
    return [this.w.inProjQkv, this.w.inProjZ, this.w.inProjBa, this.w.conv, this.w.aLog, this.w.dtBias, this.w.norm,
      this.w.outProj.weight];
  }
}
