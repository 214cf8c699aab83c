// Sampling inside the backend (Backend.sampleTokens): the engine hands each
// logits row its temperature, top-k, top-p, min-p and one uniform drawn from the
// request's RNG, and gets token ids back; the logits never reach the host.
// Rows that need the full logits on the host (logprobs, prompt logprobs, penalties,
// logit bias, allowed token ids, bad words, a min-tokens mask, a structured-output grammar) go through the
// Sampler instead.

import type { RowSampling } from '../model/batch.js';
import { TokenDrawer } from './draw.js';
import { GREEDY_TEMPERATURE, rawLogprobs } from './sampler.js';
import { argmax } from './select.js';
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

/** The reference of kernels/sample.cu: logits [numRows * vocab] -> one token per row. */
export function sampleRowsReference(logits: Float32Array, vocab: number, numRows: number,
  sampling: RowSampling | undefined, drawer = new TokenDrawer(vocab)): Int32Array {
  const out = new Int32Array(numRows);
  for (let r = 0; r < numRows; r++) {
    const row = logits.subarray(r * vocab, (r + 1) * vocab);
    const greedy = Math.max(argmax(row, 0, vocab), 0);
    const temperature = sampling?.temperature[r] ?? 0;
    if (!(temperature > 0) || !(row[greedy]! > -Infinity)) {
      out[r] = greedy;
      continue;
    }
    out[r] = drawer.drawWithUniform(row, greedy, {
      temperature, topK: sampling!.topK[r]!, topP: sampling!.topP[r]!, minP: sampling!.minP[r]!,
    }, sampling!.uniform[r]!);
  }
  return out;
}

/**
 * The reference of kernels/sample.cu's row_logprobs (prompt logprobs): token targets[i] under logits row i (raw
 * log-softmax, log-sum-exp in double), packed per row as [logprob (f32 bits), rank (1 + the ids of a larger logit),
 * then numTop (id, logprob (f32 bits)) pairs, value desc, id asc].
 */
export function rowLogprobsReference(logits: Float32Array, vocab: number, targets: Int32Array, numTop: number): Int32Array {
  const width = 2 + 2 * numTop;
  const out = new Int32Array(targets.length * width);
  const f = new Float32Array(out.buffer);
  targets.forEach((target, r) => {
    const base = r * vocab;
    const raw = rawLogprobs(logits, base, vocab, numTop);
    const x = logits[base + target]!;
    let rank = 1;
    for (let i = 0; i < vocab; i++) if (logits[base + i]! > x) rank++;
    f[r * width] = raw.logprobOf(target);
    out[r * width + 1] = rank;
    raw.top.forEach((t, j) => {
      out[r * width + 2 + 2 * j] = t.tokenId;
      f[r * width + 3 + 2 * j] = t.logprob;
    });
  });
  return out;
}
