// Whether a model can be split over `tp` ranks as sharding.ts splits it: the first config.json field the split
// cannot divide, named with both numbers (as vLLM's "Total number of attention heads (X) must be divisible by tensor
// parallel size (Y)"), so the refusal says what to change before any weight is read.

import { FP8_BLOCK } from '../backend/fp8-linear.js';
import type { ModelConfig } from '../loader/types.js';
import { padVocab, VOCAB_PADDING } from './sharding.js';

export class ParallelConfigError extends Error {
  /**
   * `field`: the config.json field (or the product of fields) that does not split; `value`: its value; `size`: the
   * tensor- (or expert-) parallel size.
   */
  constructor(readonly field: string, readonly value: number, readonly size: number, message: string) {
    super(message);
    this.name = 'ParallelConfigError';
  }
}

export interface ParallelOptions {
  /** Experts split whole across the ranks (vLLM's --enable-expert-parallel) instead of each on its intermediate dim. */
  expertParallel?: boolean;
}

function divides(field: string, value: number, tp: number, what = 'tensor-parallel'): ParallelConfigError | null {
  if (value % tp === 0) return null;
  return new ParallelConfigError(field, value, tp, `${field} (${value}) is not divisible by the ${what} size (${tp})`);
}

/** A sharded projection dimension of a block-FP8 checkpoint must keep whole 128-wide scale blocks on every rank. */
function wholeBlocks(field: string, value: number, tp: number): ParallelConfigError | null {
  if ((value / tp) % FP8_BLOCK === 0) return null;
  return new ParallelConfigError(field, value, tp, `${field} (${value}) split over tensor-parallel size ${tp} leaves ` +
    `${value / tp} a rank, not a multiple of the FP8 block (${FP8_BLOCK})`);
}

/**
 * null when `config` splits over `tp` ranks, else the first field that does not. Checked: attention heads, KV heads
 * (split when at least tp, else replicated, which needs them to divide tp), the dense MLP's, experts' and shared
 * expert's widths (or, expert-parallel, enough experts for every rank), DeltaNet heads, the padded vocabulary, and for
 * block-FP8 checkpoints whole 128-wide blocks on every rank.
 */
export function tensorParallelRefusal(config: ModelConfig, tp: number, opts: ParallelOptions = {}): ParallelConfigError | null {
  if (!Number.isInteger(tp) || tp < 1) {
    return new ParallelConfigError('tensor_parallel_size', tp, tp, `tensor-parallel size ${tp} is not a positive integer`);
  }
  if (tp === 1) return null;
  const checks: (() => ParallelConfigError | null)[] = [];
  const add = (f: () => ParallelConfigError | null): void => void checks.push(f);
  add(() => divides('num_attention_heads', config.numHeads, tp));
  add(() => {
    const kv = config.numKvHeads;
    if (kv >= tp) return divides('num_key_value_heads', kv, tp);
    if (tp % kv === 0) return null;
    return new ParallelConfigError('num_key_value_heads', kv, tp, `num_key_value_heads (${kv}) is fewer than the ` +
      `tensor-parallel size (${tp}) and does not divide it, so its heads cannot be replicated evenly across the ranks`);
  });
  const moe = config.moe;
  const mixtral = config.architecture === 'mixtral';
  const anyDense = !moe || moe.sparseLayers.some((s) => !s);
  if (anyDense) add(() => divides('intermediate_size', config.intermediateSize, tp));
  if (moe) {
    const expertsField = mixtral ? 'num_local_experts' : 'num_experts';
    const interField = mixtral ? 'intermediate_size' : 'moe_intermediate_size';
    if (opts.expertParallel) {
      add(() => moe.numExperts >= tp ? null : new ParallelConfigError(expertsField, moe.numExperts, tp,
        `${expertsField} (${moe.numExperts}) is fewer than the expert-parallel size (${tp}): some ranks would hold no expert`));
    } else {
      add(() => divides(interField, moe.expertIntermediateSize, tp));
    }
    if (moe.sharedExpertIntermediateSize !== null) {
      const shared = moe.sharedExpertIntermediateSize;
      add(() => divides('shared_expert_intermediate_size', shared, tp));
    }
  }
  const hybrid = config.hybrid;
  if (hybrid) {
    add(() => divides('linear_num_key_heads', hybrid.linearNumKeyHeads, tp));
    add(() => divides('linear_num_value_heads', hybrid.linearNumValueHeads, tp));
  }
  add(() => {
    const padded = padVocab(config.vocabSize);
    if (padded % tp === 0) return null;
    return new ParallelConfigError('vocab_size', config.vocabSize, tp, `vocab_size (${config.vocabSize}) padded to a ` +
      `multiple of ${VOCAB_PADDING} (${padded}) is not divisible by the tensor-parallel size (${tp})`);
  });
  if (config.quantization !== null) {
    add(() => wholeBlocks('num_attention_heads x head_dim', config.numHeads * config.headDim, tp));
    if (config.numKvHeads >= tp) add(() => wholeBlocks('num_key_value_heads x head_dim', config.numKvHeads * config.headDim, tp));
    if (anyDense) add(() => wholeBlocks('intermediate_size', config.intermediateSize, tp));
    if (moe && !opts.expertParallel) {
      add(() => wholeBlocks(mixtral ? 'intermediate_size' : 'moe_intermediate_size', moe.expertIntermediateSize, tp));
    }
  }
  for (const check of checks) {
    const err = check();
    if (err) return err;
  }
  return null;
}
