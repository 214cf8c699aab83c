// Whether the engine can serve contexts of max_model_len tokens for a model and its options (createEngineCore).

import type { ModelConfig } from '../loader/types.js';
import { defaultMaxModelLen, maxModelLenCap } from '../model/rope.js';
import { readKnob } from '../knobs/knobs.js';
import type { ResolvedEngineOptions } from './options.js';

/** Why the engine cannot serve contexts of maxModelLen tokens for this model and options, or null. */
export function maxModelLenRefusal(config: ModelConfig, maxModelLen: number,
  options: Pick<ResolvedEngineOptions, 'enableChunkedPrefill' | 'maxNumBatchedTokens'>,
  allowLong = readKnob('QUIRE_ALLOW_LONG_MAX_MODEL_LEN')): string | null {
  if (maxModelLen > maxModelLenCap(config)) {
    return `max_model_len (${maxModelLen}) is longer than the model's sliding window (${config.slidingWindow} tokens): `
      + `Quire computes full attention, which is the model's only within the window; pass --max-model-len ${config.slidingWindow} or less`;
  }
  const derived = defaultMaxModelLen(config);
  if (maxModelLen > derived && !allowLong) {
    return `max_model_len (${maxModelLen}) is longer than the model's context (${derived}: max_position_embeddings `
      + 'and its RoPE scaling), past which it was never trained; as vLLM, QUIRE_ALLOW_LONG_MAX_MODEL_LEN=1 allows it';
  }
  if (!options.enableChunkedPrefill && options.maxNumBatchedTokens < maxModelLen) {
    return `max_num_batched_tokens (${options.maxNumBatchedTokens}) is smaller than max_model_len (${maxModelLen}): `
      + 'with chunked prefill off a prompt must fit one step; raise --max-num-batched-tokens or lower --max-model-len';
  }
  return null;
}
