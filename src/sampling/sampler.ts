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
      const greedy = Math.max(argmax(row, 0, vocab), 0);
      const tokenId = state.params.temperature < GREEDY_TEMPERATURE ? greedy : this.drawer.draw(row, greedy, state.params, state.rng);
      tokenIds[r] = tokenId;
      logprobs.push(raw === null ? null : { tokenId, logprob: raw.logprobOf(tokenId), top: raw.top });
    }
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
