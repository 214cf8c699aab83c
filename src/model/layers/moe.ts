// A mixture-of-experts feed-forward (Qwen3-MoE's sparse block, Mixtral's block_sparse_moe): router logits from one
// projection, then the backend's moeExperts (routing, the top-k experts' SwiGLU MLPs, their weighted sum). Its
// output goes to the layer whole: the combine ends it, so there is no last projection to fuse with the next norm.

import type { MoeExperts, MoeRoute, Tensor } from '../../backend/backend.js';
import type { FeedForward, LayerContext, SublayerOut, WeightRead } from './types.js';

export class SparseMoe implements FeedForward {
  constructor(readonly router: Tensor, readonly experts: MoeExperts, readonly route: MoeRoute) {}

  forward(x: Tensor, ctx: LayerContext): SublayerOut {
    const b = ctx.backend;
    const logits = b.matmul(x, this.router, 'router');
    return { output: b.moeExperts(x, logits, this.experts, this.route) };
  }

  weightsRead(): WeightRead[] {
    const share = this.route.topK / this.experts.numExperts;
    return [this.router, { tensor: this.experts.gateUp, share }, { tensor: this.experts.down, share }];
  }
}
