// Request body -> SamplingParams through the shared validator (vLLM ranges and messages).

import type { Tokenizer } from '../loader/types.js';
import type { SamplingParams } from '../sampling/params.js';
import { SamplingParamError, validateSamplingParams, type RawSamplingParams } from '../sampling/validate.js';
import { badRequest } from './errors.js';
import type { ServerLimits } from './options.js';
import type { SamplingDefaults } from './sampling-defaults.js';
import type { Body } from './schemas.js';

export interface SamplingContext {
  vocabSize: number;
  limits: ServerLimits;
  /** Top logprobs per token as parsed for this endpoint; null = none. */
  logprobs: number | null;
  /** Top logprobs per prompt token; null = none. */
  promptLogprobs: number | null;
  /** max_tokens as requested, or the most any prompt may get; the routes set the final value per prompt. */
  maxTokens: number;
  /** Tokenizes bad_words; without it they are refused. */
  tokenizer?: Tokenizer;
  /** What the sampling fields the request leaves out (or sends as null) default to. */
  defaults?: SamplingDefaults;
}

/**
 * bad_words as token id sequences, as vLLM tokenizes them: each word (leading spaces stripped) alone, and after a
 * space where that gives a first token of its own and as many tokens (the word inside text).
 */
function badWordIds(v: unknown, tok: Tokenizer | undefined): number[][] | undefined {
  if (v === undefined || v === null) return undefined;
  if (!Array.isArray(v) || v.some((w) => typeof w !== 'string' || w.trim() === '')) {
    throw badRequest('`bad_words` must be a list of non-empty strings.', 'bad_words');
  }
  if (tok === undefined) throw badRequest('`bad_words` is not supported on this endpoint.', 'bad_words');
  const out: number[][] = [];
  for (const w of v as string[]) {
    const alone = tok.encode(w.trimStart(), { addSpecialTokens: false });
    out.push(alone);
    const inText = tok.encode(` ${w.trimStart()}`, { addSpecialTokens: false });
    if (inText[0] !== alone[0] && inText.length === alone.length) out.push(inText);
  }
  return out;
}

export function samplingFromBody(b: Body, ctx: SamplingContext): SamplingParams {
  const raw: RawSamplingParams = {
    maxTokens: ctx.maxTokens,
    temperature: b.temperature ?? ctx.defaults?.temperature,
    topP: b.top_p ?? ctx.defaults?.topP,
    topK: b.top_k ?? ctx.defaults?.topK,
    minP: b.min_p ?? ctx.defaults?.minP,
    repetitionPenalty: b.repetition_penalty ?? ctx.defaults?.repetitionPenalty,
    presencePenalty: b.presence_penalty,
    frequencyPenalty: b.frequency_penalty,
    logitBias: b.logit_bias,
    allowedTokenIds: b.allowed_token_ids,
    badWords: badWordIds(b.bad_words, ctx.tokenizer),
    seed: b.seed,
    stopTokenIds: b.stop_token_ids,
    stop: b.stop,
    includeStopStrInOutput: b.include_stop_str_in_output,
    minTokens: b.min_tokens,
    ignoreEos: b.ignore_eos,
    logprobs: ctx.logprobs,
    promptLogprobs: ctx.promptLogprobs,
    skipSpecialTokens: b.skip_special_tokens,
    speculativeDecoding: b.speculative_decoding,
  };
  try {
    return validateSamplingParams(raw, { vocabSize: ctx.vocabSize, maxLogprobs: ctx.limits.maxLogprobs, maxStopStrings: ctx.limits.maxStopStrings });
  } catch (e) {
    if (e instanceof SamplingParamError) throw badRequest(e.message, e.param);
    throw e;
  }
}
