// How an architecture's builder loads a checkpoint (every architecture takes the same options), and what a pipeline
// stage's config says it holds.

import type { PipelineStageLink } from '../backend/backend.js';
import type { Eagle3HeadDir } from '../loader/eagle3-head.js';
import type { ModelConfig } from '../loader/types.js';
import type { TensorParallelRank } from './layers/types.js';

/** How a checkpoint's float projections are loaded. */
export interface LoadOptions {
  /**
   * vLLM's --quantization fp8: projections stored in a float dtype are quantized to block FP8 at load (by the backend
   * where it can, quantizeFp8Block; else on the host), and computed W8A8 as a block-FP8 checkpoint's are.
   */
  quantization?: 'fp8' | null;
  /**
   * Tensor parallelism: this rank's collective. The config and weights given are already this rank's shard
   * (parallel/sharded-source.ts): local heads and widths, row-parallel projections' partial inputs.
   */
  tensorParallel?: TensorParallelRank | null;
  /**
   * Also load the checkpoint's multi-token-prediction head (mtp.*: --speculative-config's mtp method), on one device:
   * ModelParts.mtp. Its absence is an error naming the first tensor missing.
   */
  mtp?: boolean;
  /**
   * An EAGLE-3 head's directory (--speculative-config's eagle3 method), loaded beside the model on one device:
   * ModelParts.eagle3; the model then keeps the residual stream entering the head's three target layers every forward.
   */
  eagle3?: Eagle3HeadDir | null;
  /**
   * Pipeline parallelism: this stage's link to its neighbours. The config and weights given are already this stage's
   * (parallel/pipeline.ts: ModelConfig.pipelineStage).
   */
  pipeline?: PipelineStageLink | null;
}

/** Whether the model of `c` embeds tokens: a whole model, or the first pipeline stage. */
export function embedsTokens(c: Pick<ModelConfig, 'pipelineStage'>): boolean {
  return (c.pipelineStage?.stage ?? 0) === 0;
}

/** Whether the model of `c` computes logits (the final norm and lm_head): a whole model, or the last stage. */
export function computesLogits(c: Pick<ModelConfig, 'pipelineStage'>): boolean {
  const p = c.pipelineStage;
  return p === undefined || p.stage === p.numStages - 1;
}
