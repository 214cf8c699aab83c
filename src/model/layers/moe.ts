// A mixture-of-experts feed-forward (Qwen3-MoE's sparse block, Mixtral's block_sparse_moe; with a shared expert,
// Qwen3-Next's and Qwen3.5-MoE's): the backend's moeExperts on the router's weight (router logits, routing, the top-k
// experts' SwiGLU MLPs, their weighted sum), so a backend can run the router, routing and grouping as one kernel.
// Without a shared expert the call goes to the layer whole (SublayerOut 'moe'): the combine ends it, and the layer
// runs it fused with the norm after it where the backend can. With one, every token also runs the shared expert's
// SwiGLU MLP, its output scaled by sigmoid(x shared_expert_gate^T) (one logit a token) and added to the routed sum
// (Backend.addSigmoidGated), as transformers' Qwen2MoeSparseMoeBlock computes it.

import type { MoeExperts, MoeRoute, Tensor } from '../../backend/backend.js';
import type { FeedForward, LayerContext, SublayerOut, WeightRead } from './types.js';

/** A shared expert's weights. */
export interface SharedExpert {
  /** [2 Is, hidden]: gate rows, then up rows. */
  gateUp: Tensor;
  /** [hidden, Is] */
  down: Tensor;
  /** [1, hidden]: shared_expert_gate. */
  gate: Tensor;
}

export class SparseMoe implements FeedForward {
  constructor(readonly router: Tensor, readonly experts: MoeExperts, readonly route: MoeRoute,
    readonly shared: SharedExpert | null = null) {}

  forward(x: Tensor, ctx: LayerContext): SublayerOut {
    if (this.shared === null) return { moe: { x, router: this.router, experts: this.experts, route: this.route } };
    const b = ctx.backend;
    const out = b.moeExperts(x, this.router, this.experts, this.route);
    const y = b.matmul(b.matmulSiluMul(x, this.shared.gateUp), this.shared.down, 'shared_down');
    b.addSigmoidGated(out, b.matmul(x, this.shared.gate, 'shared_gate'), y);
    return { output: out };
  }

  weightsRead(): WeightRead[] {
    const share = this.route.topK / this.experts.numExperts;
    const shared = this.shared ? [this.shared.gateUp, this.shared.down, this.shared.gate] : [];
    return [this.router, { tensor: this.experts.gateUp, share }, { tensor: this.experts.down, share }, ...shared];
  }
}
