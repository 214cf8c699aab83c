// The dense SwiGLU MLP: silu(x gate^T) * (x up^T) in one op (gate and up fused into one weight, gate rows first),
// then down, left to the layer (fused with the next layer's input norm).

import type { Tensor } from '../../backend/backend.js';
import type { FeedForward, LayerContext, Linear, SublayerOut, WeightRead } from './types.js';

export class DenseMlp implements FeedForward {
  constructor(readonly gateUp: Tensor, readonly down: Linear) {}

  forward(x: Tensor, ctx: LayerContext): SublayerOut {
    return { input: ctx.backend.matmulSiluMul(x, this.gateUp), proj: this.down, label: 'down' };
  }

  weightsRead(): WeightRead[] {
    return [this.gateUp, this.down.weight];
  }
}
