// A pre-norm decoder layer: h = x + mixer(norm(x)); out = h + ffn(norm(h)). The residual stream is one tensor the
// norms add into in place. A sublayer's last projection runs fused with the norm after it where the backend has
// that op (matmulAddRmsNorm): the mixer's with this layer's post-mixer norm, the feed-forward's with the next
// layer's input norm; a mixture of experts' combine likewise (moeExpertsAddRmsNorm). The last layer's feed-forward
// output is left to the model's final norm. Under tensor parallelism (LayerContext.tp) each sublayer's output is
// summed over the ranks before its residual add.

import type { Tensor } from '../../backend/backend.js';
import type { FeedForward, LayerContext, Mixer, SublayerOut, WeightRead } from './types.js';

/** What a layer hands on: the next layer's normed input, or (last layer) its feed-forward output. */
export type LayerOut = { next: Tensor; ffnOut: null } | { next: null; ffnOut: Tensor };

export class DecoderLayer {
  constructor(readonly inputNorm: Tensor, readonly mixer: Mixer, readonly postMixerNorm: Tensor, readonly ffn: FeedForward) {}

  /** `x`: this layer's normed input; `nextNorm`: the next layer's input norm (null for the last layer). */
  forward(x: Tensor, residual: Tensor, nextNorm: Tensor | null, ctx: LayerContext): LayerOut {
    const h = addThenNorm(this.mixer.forward(x, ctx), residual, this.postMixerNorm, ctx);
    const f = this.ffn.forward(h, ctx);
    if (nextNorm) return { next: addThenNorm(f, residual, nextNorm, ctx), ffnOut: null };
    return { next: null, ffnOut: reduced(f, ctx) };
  }

  weightsRead(): WeightRead[] {
    return [this.inputNorm, ...this.mixer.weightsRead(), this.postMixerNorm, ...this.ffn.weightsRead()];
  }
}

/** A sublayer's output by the plain ops. */
function unfused(out: SublayerOut, ctx: LayerContext): Tensor {
  const b = ctx.backend;
  if ('output' in out) return out.output;
  if ('moe' in out) return b.moeExperts(out.moe.x, out.moe.router, out.moe.experts, out.moe.route);
  return b.matmul(out.input, out.proj.weight, out.label, out.proj.bias);
}

/** A sublayer's whole output: under tensor parallelism this rank's partial sum, summed over the ranks. */
function reduced(out: SublayerOut, ctx: LayerContext): Tensor {
  const y = unfused(out, ctx);
  ctx.tp?.allReduce(y);
  return y;
}

/**
 * residual += the sublayer's output; returns rmsnorm(residual) * norm, the projection (or the mixture of experts'
 * combine) fused with it where the backend can. Under tensor parallelism the output is summed over the ranks
 * first, so the fused kernels (which add a rank's partial output) are left out.
 */
function addThenNorm(out: SublayerOut, residual: Tensor, norm: Tensor, ctx: LayerContext): Tensor {
  const b = ctx.backend;
  if (ctx.tp !== null) return b.addRmsNorm(reduced(out, ctx), residual, norm, ctx.eps);
  if ('moe' in out && b.moeExpertsAddRmsNorm) {
    const { x, router, experts, route } = out.moe;
    return b.moeExpertsAddRmsNorm(x, router, experts, route, residual, norm, ctx.eps);
  }
  if (!('input' in out)) return b.addRmsNorm(unfused(out, ctx), residual, norm, ctx.eps);
  const { input, proj, label } = out;
  return b.matmulAddRmsNorm ? b.matmulAddRmsNorm(input, proj.weight, label, proj.bias, residual, norm, ctx.eps)
    : b.addRmsNorm(b.matmul(input, proj.weight, label, proj.bias), residual, norm, ctx.eps);
}
