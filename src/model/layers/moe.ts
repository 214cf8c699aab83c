// A mixture-of-experts feed-forward (Qwen3-MoE's sparse block, Mixtral's block_sparse_moe): the backend's moeExperts
// on the router's weight (router logits, routing, the top-k experts' SwiGLU MLPs, their weighted sum), so a backend can
// run the router, routing and grouping as one kernel. The call goes to the layer whole (SublayerOut 'moe'): the
// combine ends it, and the layer runs it fused with the norm after it where the backend can.

import type { MoeExperts, MoeRoute, Tensor } from '../../backend/backend.js';
import type { FeedForward, LayerContext, SublayerOut, WeightRead } from './types.js';

export class SparseMoe implements FeedForward {
  constructor(readonly router: Tensor, readonly experts: MoeExperts, readonly route: MoeRoute) {}

  forward(x: Tensor, _ctx: LayerContext): SublayerOut {
    return { moe: { x, router: this.router, experts: this.experts, route: this.route } };
  }

  weightsRead(): WeightRead[] {
    const share = this.route.topK / this.experts.numExperts;
    return [this.router, { tensor: this.experts.gateUp, share }, { tensor: this.experts.down, share }];
  }
}
