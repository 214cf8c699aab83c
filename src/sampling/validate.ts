// Untrusted sampling fields -> SamplingParams, with vLLM's ranges and messages.
// `param` names the field as the OpenAI wire format spells it.

import { defaultSamplingParams, type SamplingParams } from './params.js';

export class SamplingParamError extends Error {
  constructor(
    readonly param: string,
    message: string,
  ) {
    super(message);
    this.name = 'SamplingParamError';
  }
}

export interface SamplingLimits {
  vocabSize: number;
  /** Largest `logprobs` a request may ask for. */
  maxLogprobs: number;
  maxStopStrings: number;
}

export type RawSamplingParams = { [K in keyof SamplingParams]?: unknown };

const WIRE_NAMES: Record<keyof SamplingParams, string> = {
  maxTokens: 'max_tokens',
  temperature: 'temperature',
  topP: 'top_p',
  topK: 'top_k',
  minP: 'min_p',
  repetitionPenalty: 'repetition_penalty',
  presencePenalty: 'presence_penalty',
  frequencyPenalty: 'frequency_penalty',
  logitBias: 'logit_bias',
  allowedTokenIds: 'allowed_token_ids',
  badWords: 'bad_words',
  seed: 'seed',
  stopTokenIds: 'stop_token_ids',
  stop: 'stop',
  includeStopStrInOutput: 'include_stop_str_in_output',
  minTokens: 'min_tokens',
  ignoreEos: 'ignore_eos',
  logprobs: 'logprobs',
  promptLogprobs: 'prompt_logprobs',
  skipSpecialTokens: 'skip_special_tokens',
  speculativeDecoding: 'speculative_decoding',
  structuredOutput: 'response_format',
};

function fail(field: keyof SamplingParams, message: string): never {
  throw new SamplingParamError(WIRE_NAMES[field], message);
}

function show(v: unknown): string {
  return typeof v === 'string' ? JSON.stringify(v) : String(typeof v === 'object' ? JSON.stringify(v) : v);
}

function num(raw: RawSamplingParams, field: keyof SamplingParams, fallback: number): number {
  const v = raw[field];
  if (v === undefined || v === null) return fallback;
  if (typeof v !== 'number' || !Number.isFinite(v)) fail(field, `${WIRE_NAMES[field]} must be a number, got ${show(v)}.`);
  return v;
}

function int(raw: RawSamplingParams, field: keyof SamplingParams, fallback: number): number {
  const v = num(raw, field, fallback);
  if (!Number.isSafeInteger(v)) fail(field, `${WIRE_NAMES[field]} must be an integer, got ${v}.`);
  return v;
}

function bool(raw: RawSamplingParams, field: keyof SamplingParams, fallback: boolean): boolean {
  const v = raw[field];
  if (v === undefined || v === null) return fallback;
  if (typeof v !== 'boolean') fail(field, `${WIRE_NAMES[field]} must be a boolean, got ${show(v)}.`);
  return v;
}

export function validateSamplingParams(raw: RawSamplingParams, limits: SamplingLimits): SamplingParams {
  const d = defaultSamplingParams();
  const temperature = num(raw, 'temperature', d.temperature);
  if (temperature < 0) fail('temperature', `temperature must be non-negative, got ${temperature}.`);
  const topP = num(raw, 'topP', d.topP);
  if (!(topP > 0 && topP <= 1)) fail('topP', `top_p must be in (0, 1], got ${topP}.`);
  const topK = int(raw, 'topK', d.topK);
  if (topK < -1) fail('topK', `top_k must be 0 or -1 (disable), or at least 1, got ${topK}.`);
  const minP = num(raw, 'minP', d.minP);
  if (minP < 0 || minP > 1) fail('minP', `min_p must be in [0, 1], got ${minP}.`);
  const repetitionPenalty = num(raw, 'repetitionPenalty', d.repetitionPenalty);
  if (repetitionPenalty <= 0) fail('repetitionPenalty', `repetition_penalty must be greater than zero, got ${repetitionPenalty}.`);
  const presencePenalty = num(raw, 'presencePenalty', d.presencePenalty);
  if (presencePenalty < -2 || presencePenalty > 2) fail('presencePenalty', `presence_penalty must be in [-2, 2], got ${presencePenalty}.`);
  const frequencyPenalty = num(raw, 'frequencyPenalty', d.frequencyPenalty);
  if (frequencyPenalty < -2 || frequencyPenalty > 2) fail('frequencyPenalty', `frequency_penalty must be in [-2, 2], got ${frequencyPenalty}.`);
  const maxTokens = int(raw, 'maxTokens', d.maxTokens);
  if (maxTokens < 1) fail('maxTokens', `max_tokens must be at least 1, got ${maxTokens}.`);
  const minTokens = int(raw, 'minTokens', d.minTokens);
  if (minTokens < 0) fail('minTokens', `min_tokens must be greater than or equal to 0, got ${minTokens}.`);
  if (minTokens > maxTokens) fail('minTokens', `min_tokens must be less than or equal to max_tokens=${maxTokens}, got ${minTokens}.`);
  const logprobs = numLogprobs(raw, 'logprobs', limits);
  const promptLogprobs = numLogprobs(raw, 'promptLogprobs', limits);
  let seed: number | null = null;
  if (raw.seed !== undefined && raw.seed !== null) seed = int(raw, 'seed', 0);
  return {
    maxTokens,
    temperature,
    topP,
    topK,
    minP,
    repetitionPenalty,
    presencePenalty,
    frequencyPenalty,
    logitBias: validateLogitBias(raw.logitBias, limits.vocabSize),
    allowedTokenIds: validateAllowedTokenIds(raw.allowedTokenIds, limits.vocabSize),
    badWords: validateBadWords(raw.badWords, limits.vocabSize),
    seed,
    stopTokenIds: validateStopTokenIds(raw.stopTokenIds, limits.vocabSize),
    stop: validateStop(raw.stop, limits.maxStopStrings),
    includeStopStrInOutput: bool(raw, 'includeStopStrInOutput', d.includeStopStrInOutput),
    minTokens,
    ignoreEos: bool(raw, 'ignoreEos', d.ignoreEos),
    logprobs,
    promptLogprobs,
    skipSpecialTokens: bool(raw, 'skipSpecialTokens', d.skipSpecialTokens),
    speculativeDecoding: bool(raw, 'speculativeDecoding', d.speculativeDecoding),
    // Parsed and checked by the API layer (api/structured.ts), which sets it after this.
    structuredOutput: null,
  };
}

function numLogprobs(raw: RawSamplingParams, field: 'logprobs' | 'promptLogprobs', limits: SamplingLimits): number | null {
  if (raw[field] === undefined || raw[field] === null) return null;
  const n = int(raw, field, 0);
  const name = WIRE_NAMES[field];
  if (n < 0) fail(field, `${name} must be non-negative, got ${n}.`);
  if (n > limits.maxLogprobs) fail(field, `Requested ${name} of ${n}, which is greater than max allowed: ${limits.maxLogprobs}.`);
  return n;
}

function validateLogitBias(v: unknown, vocabSize: number): Record<number, number> | null {
  if (v === undefined || v === null) return null;
  if (typeof v !== 'object' || Array.isArray(v)) fail('logitBias', `logit_bias must be an object mapping token ids to biases, got ${show(v)}.`);
  const bias: Record<number, number> = {};
  const badKeys: string[] = [];
  const badValues: string[] = [];
  for (const [key, value] of Object.entries(v as Record<string, unknown>)) {
    const id = /^(0|[1-9]\d*)$/.test(key) ? Number(key) : NaN;
    if (!Number.isSafeInteger(id) || id >= vocabSize) badKeys.push(JSON.stringify(key));
    else if (typeof value !== 'number' || !Number.isFinite(value) || value < -100 || value > 100) badValues.push(`${key}: ${show(value)}`);
    else bias[id] = value;
  }
  if (badKeys.length > 0) {
    fail('logitBias', `logit_bias keys must be token ids in [0, ${vocabSize}); invalid: ${badKeys.join(', ')}.`);
  }
  if (badValues.length > 0) fail('logitBias', `logit_bias values must be in [-100, 100]; invalid: ${badValues.join(', ')}.`);
  return bias;
}

function validateStopTokenIds(v: unknown, vocabSize: number): number[] {
  if (v === undefined || v === null) return [];
  if (!Array.isArray(v)) fail('stopTokenIds', `stop_token_ids must be a list of token ids, got ${show(v)}.`);
  const bad = v.filter((id) => !Number.isSafeInteger(id) || (id as number) < 0 || (id as number) >= vocabSize);
  if (bad.length > 0) fail('stopTokenIds', `stop_token_ids must be token ids in [0, ${vocabSize}); invalid: ${bad.map(show).join(', ')}.`);
  return [...(v as number[])];
}

function validateAllowedTokenIds(v: unknown, vocabSize: number): number[] | null {
  if (v === undefined || v === null) return null;
  if (!Array.isArray(v)) fail('allowedTokenIds', `allowed_token_ids must be a list of token ids, got ${show(v)}.`);
  if (v.length === 0) fail('allowedTokenIds', 'allowed_token_ids must not be empty.');
  const bad = v.filter((id) => !Number.isSafeInteger(id) || (id as number) < 0 || (id as number) >= vocabSize);
  if (bad.length > 0) fail('allowedTokenIds', `allowed_token_ids must be token ids in [0, ${vocabSize}); invalid: ${bad.map(show).join(', ')}.`);
  return [...new Set(v as number[])];
}

function validateBadWords(v: unknown, vocabSize: number): number[][] {
  if (v === undefined || v === null) return [];
  const ok = Array.isArray(v) && v.every((w) => Array.isArray(w) && w.length > 0 &&
    w.every((id) => Number.isSafeInteger(id) && id >= 0 && id < vocabSize));
  if (!ok) fail('badWords', `bad_words must be non-empty token id sequences in [0, ${vocabSize}), got ${show(v)}.`);
  return (v as number[][]).map((w) => [...w]);
}

function validateStop(v: unknown, maxStopStrings: number): string[] {
  if (v === undefined || v === null) return [];
  const list = typeof v === 'string' ? [v] : v;
  if (!Array.isArray(list) || list.some((s) => typeof s !== 'string')) fail('stop', `stop must be a string or a list of strings, got ${show(v)}.`);
  if (list.length > maxStopStrings) fail('stop', `stop may hold at most ${maxStopStrings} strings, got ${list.length}.`);
  if (list.some((s) => s === '')) fail('stop', 'stop strings must not be empty.');
  return [...(list as string[])];
}
