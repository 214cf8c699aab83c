// The gated DeltaNet token mixer (Qwen3.5, Qwen3-Next's linear_attention layers), as transformers' GatedDeltaNet:
//
//   q | k | v = silu(causal depthwise conv1d(x in_proj_qkv^T))      per-sequence conv window (Backend.causalConv1d)
//   b | a = x in_proj_ba^T;  z = x in_proj_z^T
//   o = gated delta rule(q, k, v; beta = sigmoid(b), g = -exp(A_log) softplus(a + dt_bias))   per-sequence state
//   out = rmsnorm(o) * norm_w * silu(z) per v head, then out_proj, left to the layer (fused with the norm after it)
//
// Its state is a fixed size per sequence whatever the context: the conv window and Hv x Dk x Dv of the rule.

import { convChannels, type DeltaNetShape, type Tensor } from '../../backend/backend.js';
import type { LayerContext, LayerStateSpec, Linear, Mixer, SublayerOut, WeightRead } from './types.js';

export interface DeltaNetLayerWeights {
  /**
   * [C + Hv Dv + 2 Hv, hidden]: in_proj_qkv's rows, in_proj_z's, in_proj_b's, in_proj_a's, as one GEMM (three
   * skinny ones at decode read the same bytes slower: docs/perf-log.md, session 30); its output split by columns.
   */
  inProj: Tensor;
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
    const C = convChannels(this.shape);
    const Z = this.shape.numValueHeads * this.shape.valueDim;
    const all = b.matmul(x, this.w.inProj, 'in_proj');
    const conv = b.causalConv1d(b.columns(all, 0, C), this.w.conv, this.stateLayer, step);
    const ba = b.columns(all, C + Z, 2 * this.shape.numValueHeads);
    const gate = { z: b.columns(all, C, Z), w: this.w.norm, eps };
    const core = b.gatedDeltaRule(conv, ba, this.w.aLog, this.w.dtBias, this.shape, this.stateLayer, step, gate);
    return { input: core, proj: this.w.outProj, label: 'out_proj' };
  }

  stateSpec(): LayerStateSpec {
    return { kind: 'recurrent', shape: this.shape };
  }

  weightsRead(): WeightRead[] {
    return [this.w.inProj, this.w.conv, this.w.aLog, this.w.dtBias, this.w.norm,
      this.w.outProj.weight];
  }
}
