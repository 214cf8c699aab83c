// Request body -> SamplingParams (without maxTokens, which depends on the prompt).

import { defaultSamplingParams, type SamplingParams } from '../sampling/params.js';
import { badRequest } from './errors.js';
import { optBool, optInt, optIntList, optNumber, type Body } from './schemas.js';

export interface SamplingContext {
  vocabSize: number;
  stop: string[];
  logprobs: number | null;
}

function inRange(b: Body, name: string, lo: number, hi: number, loExclusive = false): number | null {
  const v = optNumber(b, name);
  if (v === null) return null;
  if ((loExclusive ? v <= lo : v < lo) || v > hi) {
    const loText = loExclusive ? `> ${lo}` : `>= ${lo}`;
    const text = hi === Infinity ? loText : `${loText} and <= ${hi}`;
    throw badRequest(`\`${name}\` must be ${text}, got ${v}.`, name);
  }
  return v;
}

function parseLogitBias(b: Body, vocabSize: number): Record<number, number> | null {
  const v = b.logit_bias;
  if (v === undefined || v === null) return null;
  if (typeof v !== 'object' || Array.isArray(v)) throw badRequest('`logit_bias` must be an object of token id -> bias.', 'logit_bias');
  const bias: Record<number, number> = {};
  const badKeys: string[] = [];
  const badValues: string[] = [];
  for (const [k, val] of Object.entries(v as Body)) {
    const id = /^\d+$/.test(k) ? Number(k) : NaN;
    if (!Number.isSafeInteger(id) || id >= vocabSize) badKeys.push(k);
    else if (typeof val !== 'number' || !Number.isFinite(val) || val < -100 || val > 100) badValues.push(k);
    else bias[id] = val;
  }
  if (badKeys.length > 0) {
    throw badRequest(`\`logit_bias\` keys must be token ids in [0, ${vocabSize}); invalid: ${badKeys.map((k) => JSON.stringify(k)).join(', ')}.`, 'logit_bias');
  }
  if (badValues.length > 0) {
    throw badRequest(`\`logit_bias\` values must be numbers in [-100, 100]; invalid for: ${badValues.join(', ')}.`, 'logit_bias');
  }
  return bias;
}

export function samplingFromBody(b: Body, ctx: SamplingContext): Omit<SamplingParams, 'maxTokens'> {
  const topK = optInt(b, 'top_k', -1);
  const stopTokenIds = optIntList(b, 'stop_token_ids') ?? [];
  const badStopIds = stopTokenIds.filter((id) => id < 0 || id >= ctx.vocabSize);
  if (badStopIds.length > 0) {
    throw badRequest(`\`stop_token_ids\` must be token ids in [0, ${ctx.vocabSize}); invalid: ${badStopIds.join(', ')}.`, 'stop_token_ids');
  }
  const seed = optInt(b, 'seed', Number.MIN_SAFE_INTEGER);
  const d = defaultSamplingParams();
  const { maxTokens: _unused, ...rest } = {
    ...d,
    temperature: inRange(b, 'temperature', 0, Infinity) ?? d.temperature,
    topP: inRange(b, 'top_p', 0, 1, true) ?? d.topP,
    topK: topK ?? d.topK,
    minP: inRange(b, 'min_p', 0, 1) ?? d.minP,
    repetitionPenalty: inRange(b, 'repetition_penalty', 0, Infinity, true) ?? d.repetitionPenalty,
    presencePenalty: inRange(b, 'presence_penalty', -2, 2) ?? d.presencePenalty,
    frequencyPenalty: inRange(b, 'frequency_penalty', -2, 2) ?? d.frequencyPenalty,
    logitBias: parseLogitBias(b, ctx.vocabSize),
    seed,
    stopTokenIds,
    stop: ctx.stop,
    includeStopStrInOutput: optBool(b, 'include_stop_str_in_output') ?? d.includeStopStrInOutput,
    minTokens: optInt(b, 'min_tokens', 0) ?? d.minTokens,
    ignoreEos: optBool(b, 'ignore_eos') ?? d.ignoreEos,
    logprobs: ctx.logprobs,
    skipSpecialTokens: optBool(b, 'skip_special_tokens') ?? d.skipSpecialTokens,
  };
  return rest;
}
