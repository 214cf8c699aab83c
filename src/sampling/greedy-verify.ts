// Greedy verification of proposed tokens from the device's argmax of each position (speculative decoding): a verify
// step whose rows are all greedy needs only each position's top token, not its logits on the host. At a vocabulary
// of 152k a row of f32 logits is 0.6 MB; 64 rows of k + 1 positions are ~190 MB a step to copy and scan.
//
// The accepted tokens are the host Sampler's exactly: it takes the argmax of the same logits (ties to the lowest id,
// as sample.cu does) and keeps each proposal equal to it, then the argmax after the last kept one.

import { GREEDY_TEMPERATURE } from '../backend/sampling/reference.js';
import { isDeviceSamplable } from './device-sampling.js';
import type { SampleOutput } from './sampler.js';
import type { SequenceSamplingState } from './sequence-state.js';

/** Whether the row's verification may run on the device's argmax: greedy, and nothing the host must apply. */
export function isGreedyVerifiable(state: SequenceSamplingState, eosTokenIds: readonly number[]): boolean {
  return state.params.temperature < GREEDY_TEMPERATURE && isDeviceSamplable(state, eosTokenIds);
}

/**
 * argmax: one token per logits row, the rows of each sequence in order (1 + its proposals' count). Per sequence the
 * longest prefix of proposals equal to the argmax before them, then the argmax after it: Sampler.sample's verified.
 */
export function verifyGreedy(argmax: Int32Array, drafts: readonly (readonly number[] | undefined)[]): SampleOutput {
  const tokenIds = new Int32Array(drafts.length);
  const verified: NonNullable<SampleOutput['verified']> = [];
  let at = 0;
  drafts.forEach((draft, r) => {
    const k = draft?.length ?? 0;
    const tokens: number[] = [];
    for (let j = 0; j <= k; j++) {
      const t = argmax[at + j]!;
      tokens.push(t);
      if (j === k || t !== draft![j]) break;
    }
    at += k + 1;
    tokenIds[r] = tokens[0]!;
    verified.push(k > 0 ? { tokenIds: tokens, logprobs: tokens.map(() => null) } : null);
  });
  if (at !== argmax.length) throw new RangeError(`verifyGreedy: ${argmax.length} tokens for ${at} rows`);
  return { tokenIds, logprobs: drafts.map(() => null), verified };
}
