// Per-request sampling parameters, as the engine sees them (already validated;
// see validateSamplingParams in ./validate.ts). Names follow vLLM's SamplingParams.

import type { StructuredOutputSpec } from './structured-output.js';

export interface SamplingParams {
  /** Number of new tokens at most. */
  maxTokens: number;
  /** 0 = greedy. */
  temperature: number;
  /** (0, 1]; 1 = off. */
  topP: number;
  /** -1 or 0 = off. */
  topK: number;
  /** [0, 1]; 0 = off. */
  minP: number;
  /** > 0; 1 = off. Applied to prompt and generated tokens (vLLM semantics). */
  repetitionPenalty: number;
  /** [-2, 2]; applied to generated tokens. */
  presencePenalty: number;
  frequencyPenalty: number;
  /** token id -> bias added to its logit. */
  logitBias: Record<number, number> | null;
  /** Only these token ids may be sampled (vLLM's allowed_token_ids); null = any. */
  allowedTokenIds: number[] | null;
  /**
   * Token id sequences the output must not contain (vLLM's bad_words, tokenized by the API): the last id of each is
   * banned where the output so far ends with the ids before it (a one-id word is always banned).
   */
  badWords: number[][];
  /** Seeds this request's own RNG; null = engine RNG. */
  seed: number | null;
  /** Token ids that end generation (besides EOS unless ignoreEos). */
  stopTokenIds: number[];
  /** Stop strings (matched on the detokenized text, on the API side). */
  stop: string[];
  includeStopStrInOutput: boolean;
  /** EOS and stop tokens are not honoured before this many new tokens. */
  minTokens: number;
  ignoreEos: boolean;
  /** Number of top logprobs to return per token; null = none. */
  logprobs: number | null;
  /**
   * Number of top logprobs to return per prompt token (vLLM's prompt_logprobs); null = none. The prompt's every
   * position is then computed (no prefix-cache hit) and its logits come to the host.
   */
  promptLogprobs: number | null;
  skipSpecialTokens: boolean;
  /**
   * Whether the engine may speculate for this request where --speculative-config is on (Quire's
   * speculative_decoding: false opts out, for a request whose latency must not vary with proposals' luck).
   */
  speculativeDecoding: boolean;
  /** What the output must match (response_format / structured_outputs); null = free text. */
  structuredOutput: StructuredOutputSpec | null;
}

export function defaultSamplingParams(overrides: Partial<SamplingParams> = {}): SamplingParams {
  return {
    maxTokens: 16,
    temperature: 1,
    topP: 1,
    topK: -1,
    minP: 0,
    repetitionPenalty: 1,
    presencePenalty: 0,
    frequencyPenalty: 0,
    logitBias: null,
    allowedTokenIds: null,
    badWords: [],
    seed: null,
    stopTokenIds: [],
    stop: [],
    includeStopStrInOutput: false,
    minTokens: 0,
    ignoreEos: false,
    logprobs: null,
    promptLogprobs: null,
    skipSpecialTokens: true,
    speculativeDecoding: true,
    structuredOutput: null,
    ...overrides,
  };
}
