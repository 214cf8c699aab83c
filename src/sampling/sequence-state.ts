// What the sampler keeps per request between steps: its params, its RNG, and
// token counts for the penalties, updated as tokens are appended (never
// recounted from the whole sequence).

import type { SamplingParams } from './params.js';
import type { Rng } from '../backend/sampling/rng.js';
import type { TokenConstraint } from './structured-output.js';

export class SequenceSamplingState {
  readonly params: SamplingParams;
  readonly rng: Rng;
  /** Distinct prompt token ids (repetition penalty). */
  readonly promptTokenIds: ReadonlySet<number>;
  /** Generated token id -> number of times generated. */
  readonly outputTokenCounts = new Map<number, number>();
  private numOutput = 0;
  /** logitBias as parallel arrays (ids and biases). */
  readonly biasIds: Int32Array;
  readonly biasValues: Float32Array;
  /** The output so far, in order, when bad words need it (else empty). */
  readonly outputTokenIds: number[] = [];
  /** The grammar the output must follow (structured outputs); null = none. */
  constraint: TokenConstraint | null = null;

  constructor(params: SamplingParams, promptTokenIds: readonly number[], rng: Rng) {
    this.params = params;
    this.rng = rng;
    this.promptTokenIds = params.repetitionPenalty !== 1 ? new Set(promptTokenIds) : new Set();
    const bias = Object.entries(params.logitBias ?? {});
    this.biasIds = Int32Array.from(bias, ([id]) => Number(id));
    this.biasValues = Float32Array.from(bias, ([, v]) => v);
  }

  get numOutputTokens(): number {
    return this.numOutput;
  }

  appendOutputTokens(tokenIds: readonly number[]): void {
    for (const t of tokenIds) {
      this.outputTokenCounts.set(t, (this.outputTokenCounts.get(t) ?? 0) + 1);
      this.constraint?.accept(t);
    }
    if (this.params.badWords.length > 0) this.outputTokenIds.push(...tokenIds);
    this.numOutput += tokenIds.length;
  }

  /** Rolls back the last generated tokens (rejected speculative tokens). */
  removeOutputTokens(tokenIds: readonly number[]): void {
    if (this.constraint !== null) throw new Error('a structured output cannot take tokens back');
    for (const t of tokenIds) {
      const count = this.outputTokenCounts.get(t);
      if (count === undefined) throw new Error(`token ${t} was never generated`);
      if (count === 1) this.outputTokenCounts.delete(t);
      else this.outputTokenCounts.set(t, count - 1);
    }
    if (this.params.badWords.length > 0) this.outputTokenIds.length -= tokenIds.length;
    this.numOutput -= tokenIds.length;
  }
}

/**
 * In place on row[0 .. vocab): -Infinity outside allowedTokenIds, and on the last id of each bad word whose ids
 * before it end the output so far (vLLM's allowed_token_ids and bad_words).
 */
export function applyTokenBans(row: Float32Array, vocab: number, state: SequenceSamplingState): void {
  const { allowedTokenIds, badWords } = state.params;
  if (allowedTokenIds !== null) {
    const kept = allowedTokenIds.map((id) => row[id]!);
    row.fill(-Infinity, 0, vocab);
    allowedTokenIds.forEach((id, i) => { row[id] = kept[i]!; });
  }
  const out = state.outputTokenIds;
  for (const w of badWords) {
    const n = w.length - 1;
    if (n > out.length) continue;
    let match = true;
    for (let i = 0; i < n && match; i++) match = out[out.length - n + i] === w[i];
    if (match && w[n]! < vocab) row[w[n]!] = -Infinity;
  }
}

/**
 * In place on row[0 .. vocab): repetition penalty over prompt and output ids
 * (positive logits divided, others multiplied), then frequency and presence
 * penalties over output ids (vLLM's apply_penalties).
 */
export function applyPenalties(row: Float32Array, vocab: number, state: SequenceSamplingState): void {
  const { repetitionPenalty, frequencyPenalty, presencePenalty } = state.params;
  if (repetitionPenalty !== 1) {
    const penalize = (id: number) => {
      if (id < 0 || id >= vocab) return;
      const v = row[id]!;
      row[id] = v > 0 ? v / repetitionPenalty : v * repetitionPenalty;
    };
    for (const id of state.promptTokenIds) penalize(id);
    for (const id of state.outputTokenCounts.keys()) if (!state.promptTokenIds.has(id)) penalize(id);
  }
  if (frequencyPenalty !== 0 || presencePenalty !== 0) {
    for (const [id, count] of state.outputTokenCounts) {
      if (id < 0 || id >= vocab) continue;
      row[id] = row[id]! - frequencyPenalty * count - presencePenalty;
    }
  }
}
