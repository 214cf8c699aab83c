// Logits rows -> one token per row, in vLLM's order:
//   raw logprobs (log_softmax of the model's logits, before anything below)
//   logit bias -> min-tokens mask -> repetition, frequency, presence penalties
//   temperature == 0: argmax (ties to the lowest id)
//   else: / temperature -> min-p -> top-k -> top-p -> draw from the row's RNG
// (vLLM v1 applies min-p before top-k/top-p; top-p renormalises what is left.)
// Only top-k/top-p sort, and only the candidates they keep (partial selection).

import type { TokenLogprob } from '../engine/types.js';
import type { SamplingParams } from './params.js';
import { Rng } from './rng.js';
import { argmax, logSumExp, topIds } from './select.js';
import { applyPenalties, SequenceSamplingState } from './sequence-state.js';

/** Below this a temperature is greedy (vLLM's _SAMPLING_EPS). */
export const GREEDY_TEMPERATURE = 1e-5;

const TOP_P_FIRST_GUESS = 256;

export interface SamplerOptions {
  /** Width of a logits row (may exceed the tokenizer's vocabulary: padded heads). */
  vocabSize: number;
  eosTokenIds: readonly number[];
  /** Seeds the engine-level RNG that requests without a seed share. */
  seed?: number;
}

export interface SampleOutput {
  tokenIds: Int32Array;
  /** Per row: present when that row's params ask for logprobs. */
  logprobs: (TokenLogprob | null)[];
}

export class Sampler {
  readonly vocabSize: number;
  readonly eosTokenIds: readonly number[];
  readonly engineRng: Rng;
  private readonly scratch: Float32Array;

  constructor(opts: SamplerOptions) {
    this.vocabSize = opts.vocabSize;
    this.eosTokenIds = [...opts.eosTokenIds];
    this.engineRng = new Rng(opts.seed ?? 0);
    this.scratch = new Float32Array(opts.vocabSize);
  }

  /** State for a new request: its own RNG when it has a seed, else the engine's. */
  newSequenceState(params: SamplingParams, promptTokenIds: readonly number[]): SequenceSamplingState {
    const rng = params.seed === null ? this.engineRng : new Rng(params.seed);
    return new SequenceSamplingState(params, promptTokenIds, rng);
  }

  /** logits: [rows.length * vocabSize], row-major; not modified. */
  sample(logits: Float32Array, rows: readonly SequenceSamplingState[]): SampleOutput {
    const vocab = this.vocabSize;
    if (logits.length < rows.length * vocab) {
      throw new RangeError(`logits hold ${logits.length} values, need ${rows.length} rows x ${vocab}`);
    }
    const tokenIds = new Int32Array(rows.length);
    const logprobs: (TokenLogprob | null)[] = [];
    for (let r = 0; r < rows.length; r++) {
      const state = rows[r]!;
      const base = r * vocab;
      const raw = state.params.logprobs !== null ? rawLogprobs(logits, base, vocab, state.params.logprobs) : null;
      const row = this.scratch;
      row.set(logits.subarray(base, base + vocab));
      this.processLogits(row, state);
      const tokenId = pickToken(row, vocab, state);
      tokenIds[r] = tokenId;
      logprobs.push(raw === null ? null : { tokenId, logprob: raw.logprobOf(tokenId), top: raw.top });
    }
    return { tokenIds, logprobs };
  }

  private processLogits(row: Float32Array, state: SequenceSamplingState): void {
    const vocab = this.vocabSize;
    for (let i = 0; i < state.biasIds.length; i++) {
      const id = state.biasIds[i]!;
      if (id < vocab) row[id] = row[id]! + state.biasValues[i]!;
    }
    const { minTokens, ignoreEos, stopTokenIds } = state.params;
    if (state.numOutputTokens < minTokens) {
      for (const id of stopTokenIds) if (id >= 0 && id < vocab) row[id] = -Infinity;
      if (!ignoreEos) for (const id of this.eosTokenIds) if (id >= 0 && id < vocab) row[id] = -Infinity;
    }
    applyPenalties(row, vocab, state);
  }
}

function rawLogprobs(logits: Float32Array, base: number, vocab: number, numTop: number) {
  const { logZ } = logSumExp(logits, base, vocab);
  const logprobOf = (id: number) => logits[base + id]! - logZ;
  const top = Array.from(topIds(logits, base, vocab, numTop), (id) => ({ tokenId: id, logprob: logprobOf(id) }));
  return { logprobOf, top };
}

/** row has bias, mask and penalties applied; it is scaled and masked further here. */
function pickToken(row: Float32Array, vocab: number, state: SequenceSamplingState): number {
  const { temperature, minP, topK, topP } = state.params;
  const greedy = argmax(row, 0, vocab);
  if (temperature < GREEDY_TEMPERATURE || greedy < 0) return Math.max(greedy, 0);
  if (temperature !== 1) for (let i = 0; i < vocab; i++) row[i] = row[i]! / temperature;
  const max = row[greedy]!;
  if (minP > 0) {
    // p_i >= minP * p_max  <=>  l_i >= l_max + ln(minP)
    const cutoff = max + Math.log(minP);
    for (let i = 0; i < vocab; i++) if (row[i]! < cutoff) row[i] = -Infinity;
  }
  let candidates: Int32Array | null = null;
  if (topK > 0 && topK < vocab) candidates = topKWithTies(row, vocab, topK);
  if (topP < 1) candidates = topPCandidates(row, vocab, topP, candidates);
  const u = state.rng.nextFloat();
  return candidates === null ? drawFromRow(row, vocab, max, u) : drawFromCandidates(row, candidates, max, u);
}

/** Every id whose logit is >= the k-th largest (ties at the k-th kept, as vLLM), best first. */
function topKWithTies(row: Float32Array, vocab: number, k: number): Int32Array {
  const top = topIds(row, 0, vocab, k);
  if (top.length < k) return top;
  const kth = row[top[k - 1]!]!;
  let numAtLeast = 0;
  for (let i = 0; i < vocab; i++) if (row[i]! >= kth) numAtLeast++;
  return numAtLeast === k ? top : topIds(row, 0, vocab, numAtLeast);
}

/**
 * Smallest best-first prefix whose mass reaches p: id j is kept while the mass
 * of the ids before it is < p. Sorts only as many candidates as it needs.
 */
function topPCandidates(row: Float32Array, vocab: number, p: number, sorted: Int32Array | null): Int32Array {
  const max = row[argmax(row, 0, vocab)]!;
  let z = 0;
  let numFinite = 0;
  if (sorted !== null) {
    for (const id of sorted) z += Math.exp(row[id]! - max);
    numFinite = sorted.length;
  } else {
    for (let i = 0; i < vocab; i++) {
      const v = row[i]!;
      if (v > -Infinity) {
        z += Math.exp(v - max);
        numFinite++;
      }
    }
  }
  for (let guess = TOP_P_FIRST_GUESS; ; guess *= 8) {
    const top = sorted ?? topIds(row, 0, vocab, Math.min(guess, numFinite));
    let massBefore = 0;
    for (let j = 0; j < top.length; j++) {
      if (massBefore >= p) return top.subarray(0, j);
      massBefore += Math.exp(row[top[j]!]! - max) / z;
    }
    if (sorted !== null || top.length >= numFinite) return top;
  }
}

function drawFromRow(row: Float32Array, vocab: number, max: number, u: number): number {
  let z = 0;
  for (let i = 0; i < vocab; i++) {
    const v = row[i]!;
    if (v > -Infinity) z += Math.exp(v - max);
  }
  const target = u * z;
  let cumulative = 0;
  let last = -1;
  for (let i = 0; i < vocab; i++) {
    const v = row[i]!;
    if (!(v > -Infinity)) continue;
    cumulative += Math.exp(v - max);
    last = i;
    if (cumulative > target) return i;
  }
  return last;
}

function drawFromCandidates(row: Float32Array, candidates: Int32Array, max: number, u: number): number {
  let z = 0;
  for (const id of candidates) z += Math.exp(row[id]! - max);
  const target = u * z;
  let cumulative = 0;
  for (const id of candidates) {
    cumulative += Math.exp(row[id]! - max);
    if (cumulative > target) return id;
  }
  return candidates[candidates.length - 1]!;
}
