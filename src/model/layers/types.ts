// What a decoder layer is made of. A layer is a token mixer (attention; later gated DeltaNet) and a feed-forward
// (a dense MLP or a mixture of experts), each behind a pre-norm and a residual add. A sublayer may leave its
// last projection to the layer (SublayerOut 'proj'), so the layer can run it fused with the norm after it
// (Backend.matmulAddRmsNorm): the residual add and the next norm in the projection's kernel.

import type { Backend, StepInputs, Tensor } from '../../backend/backend.js';

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

/** The state a layer keeps across steps, per sequence (kv/ groups layers of equal specs into one KV cache group). */
export type LayerStateSpec = { kind: 'full_attention'; numKvHeads: number; headDim: number };

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
