// Token-level stop check after a new token is appended (vLLM's check_stop).
// Stop strings are matched on text, on the API side (engine/detokenizer.ts).

import type { SamplingParams } from './params.js';

export interface StopCheckState {
  sampling: Pick<SamplingParams, 'maxTokens' | 'minTokens' | 'ignoreEos' | 'stopTokenIds'>;
  numPromptTokens: number;
  /** Output tokens so far, the new one included. */
  numOutputTokens: number;
  maxModelLen: number;
}

export type StopResult =
  | null
  /** eos: ended by an EOS id (vLLM reports no stop_reason for it). */
  | { reason: 'stop'; stopTokenId: number; eos: boolean }
  | { reason: 'length' };

export function checkStop(state: StopCheckState, newTokenId: number, eosIds: readonly number[]): StopResult {
  const { sampling, numOutputTokens } = state;
  // Stop tokens count once minTokens new tokens exist (the sampler masks them before).
  if (numOutputTokens >= sampling.minTokens) {
    if (!sampling.ignoreEos && eosIds.includes(newTokenId)) return { reason: 'stop', stopTokenId: newTokenId, eos: true };
    if (sampling.stopTokenIds.includes(newTokenId)) return { reason: 'stop', stopTokenId: newTokenId, eos: false };
  }
  if (numOutputTokens >= sampling.maxTokens) return { reason: 'length' };
  if (state.numPromptTokens + numOutputTokens >= state.maxModelLen) return { reason: 'length' };
  return null;
}
