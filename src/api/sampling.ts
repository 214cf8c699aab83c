// Request body -> SamplingParams through the shared validator (vLLM ranges and messages).

import type { SamplingParams } from '../sampling/params.js';
import { SamplingParamError, validateSamplingParams, type RawSamplingParams } from '../sampling/validate.js';
import { badRequest } from './errors.js';
import type { ServerLimits } from './options.js';
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
}

export function samplingFromBody(b: Body, ctx: SamplingContext): SamplingParams {
  const raw: RawSamplingParams = {
    maxTokens: ctx.maxTokens,
    temperature: b.temperature,
    topP: b.top_p,
    topK: b.top_k,
    minP: b.min_p,
    repetitionPenalty: b.repetition_penalty,
    presencePenalty: b.presence_penalty,
    frequencyPenalty: b.frequency_penalty,
    logitBias: b.logit_bias,
    seed: b.seed,
    stopTokenIds: b.stop_token_ids,
    stop: b.stop,
    includeStopStrInOutput: b.include_stop_str_in_output,
    minTokens: b.min_tokens,
    ignoreEos: b.ignore_eos,
    logprobs: ctx.logprobs,
    promptLogprobs: ctx.promptLogprobs,
    skipSpecialTokens: b.skip_special_tokens,
  };
  try {
    return validateSamplingParams(raw, { vocabSize: ctx.vocabSize, maxLogprobs: ctx.limits.maxLogprobs, maxStopStrings: ctx.limits.maxStopStrings });
  } catch (e) {
    if (e instanceof SamplingParamError) throw badRequest(e.message, e.param);
    throw e;
  }
}
