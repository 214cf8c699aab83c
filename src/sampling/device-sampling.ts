// Sampling inside the backend (Backend.sampleTokens): the engine hands each
// logits row its temperature, top-k, top-p, min-p and one uniform drawn from the
// request's RNG, and gets token ids back; the logits never reach the host.
// Rows that need the full logits on the host (logprobs, prompt logprobs, penalties,
// logit bias, allowed token ids, bad words, a min-tokens mask, a structured-output grammar) go through the
// Sampler instead.

import type { RowSampling } from '../backend/batch.js';
import { GREEDY_TEMPERATURE } from '../backend/sampling/reference.js';
import type { SequenceSamplingState } from './sequence-state.js';

/** Whether the backend can pick this row's token without the host seeing its logits. */
export function isDeviceSamplable(state: SequenceSamplingState, eosTokenIds: readonly number[]): boolean {
  const p = state.params;
  if (p.logprobs !== null || p.promptLogprobs !== null || state.biasIds.length > 0 || state.constraint !== null) return false;
  if (p.allowedTokenIds !== null || p.badWords.length > 0) return false;
  if (p.repetitionPenalty !== 1 || p.frequencyPenalty !== 0 || p.presencePenalty !== 0) return false;
  const masksStops = p.stopTokenIds.length > 0 || (!p.ignoreEos && eosTokenIds.length > 0);
  return !(state.numOutputTokens < p.minTokens && masksStops);
}

/**
 * Row parameters for `states` (in logits-row order), padded to `numRows` greedy
 * rows. Draws one uniform per non-greedy row from its RNG, as Sampler.sample would.
 */
export function buildRowSampling(states: readonly SequenceSamplingState[], numRows: number): RowSampling {
  const s: RowSampling = {
    temperature: new Float32Array(numRows), topK: new Int32Array(numRows), topP: new Float32Array(numRows).fill(1),
    minP: new Float32Array(numRows), uniform: new Float32Array(numRows),
  };
  states.forEach((state, r) => {
    const p = state.params;
    if (p.temperature < GREEDY_TEMPERATURE) return;
    s.temperature[r] = p.temperature;
    s.topK[r] = p.topK;
    s.topP[r] = p.topP;
    s.minP[r] = p.minP;
    s.uniform[r] = state.rng.nextFloat();
  });
  return s;
}
