// What a decoder layer is made of. A layer is a token mixer (attention or gated DeltaNet) and a feed-forward
// (a dense MLP or a mixture of experts), each behind a pre-norm and a residual add. A sublayer may leave its
// last projection to the layer (SublayerOut 'proj'), so the layer can run it fused with the norm after it
// (Backend.matmulAddRmsNorm): the residual add and the next norm in the projection's kernel; a mixture of experts
// leaves its whole call (SublayerOut 'moe', Backend.moeExpertsAddRmsNorm) for the same reason.

import type { Backend, DeltaNetShape, MoeExperts, MoeRoute, StepInputs, Tensor, TensorParallelRank } from '../../backend/backend.js';

export type { TensorParallelRank } from '../../backend/backend.js';

/** A projection's weight [N, K] and optional bias [N]. */
export interface Linear {
  weight: Tensor;
  bias: Tensor | null;
}

/** A mixture of experts' call (Backend.moeExperts' arguments), left to the layer to run with the norm after it. */
export interface MoeCall {
  x: Tensor;
  router: Tensor;
  experts: MoeExperts;
  route: MoeRoute;
}

/**
 * What a sublayer gives the layer: its output, its input to a last projection the layer runs, or (a mixture of
 * experts, whose combine ends it) its whole call, which the layer runs fused with the norm after it where the backend
 * has that op (Backend.moeExpertsAddRmsNorm).
 */
export type SublayerOut = { output: Tensor } | { input: Tensor; proj: Linear; label: string } | { moe: MoeCall };

/** A weight a one-token step reads: whole, or (a mixture of experts' stacked experts) the share one token routes to. */
export type WeightRead = Tensor | null | { tensor: Tensor; share: number };

/** One step's forward context. */
export interface LayerContext {
  backend: Backend;
  step: StepInputs;
  eps: number;
  /** Tensor parallelism across ranks, or null on one GPU. */
  tp: TensorParallelRank | null;
}

/**
 * The state a layer keeps across steps, per sequence (kv/ groups layers of equal specs into one KV cache group):
 * KV pages of its heads, or (a gated DeltaNet layer) one fixed-size recurrent state of its shape (the conv
 * window and the delta-rule state: recurrentStateBytes).
 */
export type LayerStateSpec = { kind: 'full_attention'; numKvHeads: number; headDim: number }
  | { kind: 'recurrent'; shape: DeltaNetShape };

/**
 * Bytes of one layer's recurrent state of one sequence: the conv window (K - 1 rows of C, f32) and Hv x Dk x Dv of
 * ssmBytesPerElement each (Backend.ssmBytesPerElement: 4, or 2 for bf16 states).
 */
export function recurrentStateBytes(s: DeltaNetShape, ssmBytesPerElement = 4): number {
  const channels = 2 * s.numKeyHeads * s.keyDim + s.numValueHeads * s.valueDim;
  return 4 * (s.convKernel - 1) * channels + ssmBytesPerElement * s.numValueHeads * s.keyDim * s.valueDim;
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
