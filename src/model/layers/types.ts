// What a decoder layer is made of. A layer is a token mixer (attention; later gated DeltaNet) and a feed-forward
// (a dense MLP or a mixture of experts), each behind a pre-norm and a residual add. A sublayer may leave its
// last projection to the layer (SublayerOut 'proj'), so the layer can run it fused with the norm after it
// (Backend.matmulAddRmsNorm): the residual add and the next norm in the projection's kernel.

import type { Backend, DeltaNetShape, StepInputs, Tensor } from '../../backend/backend.js';

/** A projection's weight [N, K] and optional bias [N]. */
export interface Linear {
  weight: Tensor;
  bias: Tensor | null;
}

/** What a sublayer gives the layer: its output, or its input to a last projection the layer runs. */
export type SublayerOut = { output: Tensor } | { input: Tensor; proj: Linear; label: string };

/** A weight a one-token step reads: whole, or (a mixture of experts' stacked experts) the share one token routes to. */
export type WeightRead = Tensor | null | { tensor: Tensor; share: number };

/** One step's forward context. */
export interface LayerContext {
  backend: Backend;
  step: StepInputs;
  eps: number;
}

/**
 * The state a layer keeps across steps, per sequence (kv/ groups layers of equal specs into one KV cache group):
 * KV pages of its heads, or (a gated DeltaNet layer) one fixed-size recurrent state of its shape, f32 (the conv
 * window and the delta-rule state: recurrentStateBytes).
 */
export type LayerStateSpec = { kind: 'full_attention'; numKvHeads: number; headDim: number }
  | { kind: 'recurrent'; shape: DeltaNetShape };

/** Bytes of one layer's recurrent state of one sequence: the conv window (K - 1 rows of C) and Hv x Dk x Dv, f32. */
export function recurrentStateBytes(s: DeltaNetShape): number {
  const channels = 2 * s.numKeyHeads * s.keyDim + s.numValueHeads * s.valueDim;
  return 4 * ((s.convKernel - 1) * channels + s.numValueHeads * s.keyDim * s.valueDim);
}

export interface Mixer {
  forward(x: Tensor, ctx: LayerContext): SublayerOut;
  /** The state it keeps per sequence, or null (a mixer that keeps none). */
  stateSpec(): LayerStateSpec | null;
  /** The weights a one-token step reads (for the bandwidth roofline). */
  weightsRead(): WeightRead[];
}

export interface FeedForward {
  forward(x: Tensor, ctx: LayerContext): SublayerOut;
  weightsRead(): WeightRead[];
}
