// How an architecture's builder loads a checkpoint (every architecture takes the same options).

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
}
