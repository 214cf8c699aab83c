// Logits rows -> one token per row, in vLLM's order:
//   raw logprobs (log_softmax of the model's logits, before anything below)
//   structured-output grammar mask -> allowed token ids / bad words -> logit bias -> min-tokens mask -> repetition,
//   frequency, presence penalties
//   temperature == 0: argmax (ties to the lowest id)
//   else: / temperature -> min-p -> top-k -> top-p -> draw from the row's RNG
// (vLLM v1 applies min-p before top-k/top-p; top-p renormalises what is left.)
// Nothing sorts the vocabulary: see draw.ts.

import type { TokenLogprob } from './types.js';
import type { SamplingParams } from './params.js';
import { Rng } from '../backend/sampling/rng.js';
import { TokenDrawer } from '../backend/sampling/draw.js';
import { argmax } from '../backend/sampling/select.js';
import { GREEDY_TEMPERATURE, rawLogprobs } from '../backend/sampling/reference.js';
import { applyPenalties, applyTokenBans, SequenceSamplingState } from './sequence-state.js';
import { acceptDraft, sampleRecovered } from './rejection-sampler.js';

/** Below this a temperature is greedy (vLLM's _SAMPLING_EPS). */

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
  /** Prompt logprobs the step's extra logits rows gave, by request id, in position order. */
  promptLogprobs?: Map<string, TokenLogprob[]>;
  /**
   * Per row with draft tokens (speculative decoding; null for others): the tokens verification emits (the accepted
   * drafts, then the target's own next token) and, when the row asks for them, their logprobs under the target.
   * tokenIds[row] is the first of them.
   */
  verified?: ({ tokenIds: number[]; logprobs: (TokenLogprob | null)[] } | null)[];
}

export class Sampler {
  readonly vocabSize: number;
  readonly eosTokenIds: readonly number[];
  readonly engineRng: Rng;
  private readonly scratch: Float32Array;
  private readonly drawer: TokenDrawer;

  constructor(opts: SamplerOptions) {
    this.vocabSize = opts.vocabSize;
    this.eosTokenIds = [...opts.eosTokenIds];
    this.engineRng = new Rng(opts.seed ?? 0);
    this.scratch = new Float32Array(opts.vocabSize);
    this.drawer = new TokenDrawer(opts.vocabSize);
  }

  /** State for a new request: its own RNG when it has a seed, else the engine's. */
  newSequenceState(params: SamplingParams, promptTokenIds: readonly number[]): SequenceSamplingState {
    const rng = params.seed === null ? this.engineRng : new Rng(params.seed);
    return new SequenceSamplingState(params, promptTokenIds, rng);
  }

  /**
   * logits: [numRows * vocabSize], row-major; not modified. One logits row per state, or, where drafts[r] holds
   * k > 0 proposed tokens, k + 1 consecutive rows for state r (its last token's and each draft's), verified.
   */
  sample(logits: Float32Array, rows: readonly SequenceSamplingState[],
    drafts?: readonly (readonly number[] | undefined)[]): SampleOutput {
    const vocab = this.vocabSize;
    const numRows = rows.reduce((a, _, r) => a + 1 + (drafts?.[r]?.length ?? 0), 0);
    if (logits.length < numRows * vocab) {
      throw new RangeError(`logits hold ${logits.length} values, need ${numRows} rows x ${vocab}`);
    }
    const tokenIds = new Int32Array(rows.length);
    const logprobs: (TokenLogprob | null)[] = [];
    const verified: NonNullable<SampleOutput['verified']> = [];
    let at = 0;
    for (let r = 0; r < rows.length; r++) {
      const state = rows[r]!;
      const draft = drafts?.[r];
      if (draft !== undefined && draft.length > 0) {
        const v = this.verify(logits, at, state, draft);
        at += draft.length + 1;
        tokenIds[r] = v.tokenIds[0]!;
        logprobs.push(v.logprobs[0]!);
        verified.push(v);
        continue;
      }
      const { tokenId, logprob } = this.sampleRow(logits, at++, state, null);
      tokenIds[r] = tokenId;
      logprobs.push(logprob);
      verified.push(null);
    }
    return drafts === undefined ? { tokenIds, logprobs } : { tokenIds, logprobs, verified };
  }

  /**
   * One row: processed as the state says, then argmax (greedy), a draw, or, with a draft token, rejection
   * sampling against it (the token returned is the draft when it is kept).
   */
  private sampleRow(logits: Float32Array, rowIndex: number, state: SequenceSamplingState, draft: number | null):
    { tokenId: number; logprob: TokenLogprob | null } {
    const vocab = this.vocabSize;
    const base = rowIndex * vocab;
    const raw = state.params.logprobs !== null ? rawLogprobs(logits, base, vocab, state.params.logprobs) : null;
    const row = this.scratch;
    row.set(logits.subarray(base, base + vocab));
    this.processLogits(row, state);
    const greedy = Math.max(argmax(row, 0, vocab), 0);
    let tokenId: number;
    if (state.params.temperature < GREEDY_TEMPERATURE) tokenId = greedy;
    else if (draft === null) tokenId = this.drawer.draw(row, greedy, state.params, state.rng);
    else {
      const probs = this.drawer.distribution(row, greedy, state.params);
      tokenId = acceptDraft(probs, draft, state.rng) ? draft : sampleRecovered(probs, draft, state.rng);
    }
    return { tokenId, logprob: raw === null ? null : { tokenId, logprob: raw.logprobOf(tokenId), top: raw.top } };
  }

  /**
   * Verifies k draft tokens on logits rows first .. first + k: position j is sampled (or rejection-sampled against
   * draft j) with the state as it would be had the tokens before it been generated one a step (penalties, min
   * tokens), so each emitted token has the target's distribution; stops at the first rejection, else adds the
   * bonus token of row first + k. The state is left as it was (the engine appends what it keeps).
   */
  private verify(logits: Float32Array, first: number, state: SequenceSamplingState, drafts: readonly number[]):
    { tokenIds: number[]; logprobs: (TokenLogprob | null)[] } {
    const tokenIds: number[] = [];
    const logprobs: (TokenLogprob | null)[] = [];
    for (let j = 0; j <= drafts.length; j++) {
      const draft = j < drafts.length ? drafts[j]! : null;
      const { tokenId, logprob } = this.sampleRow(logits, first + j, state, draft);
      tokenIds.push(tokenId);
      logprobs.push(logprob);
      if (tokenId !== draft) break;
      state.appendOutputTokens([tokenId]);
    }
    // every token but the last was an accepted draft, appended above
    if (tokenIds.length > 1) state.removeOutputTokens(tokenIds.slice(0, -1));
    return { tokenIds, logprobs };
  }

  private processLogits(row: Float32Array, state: SequenceSamplingState): void {
    const vocab = this.vocabSize;
    state.constraint?.maskLogits(row, vocab);
    applyTokenBans(row, vocab, state);
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
