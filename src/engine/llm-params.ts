// What the LLM class takes: vLLM's names (max_tokens, top_p, max_model_len, ...) or their camelCase forms
// (maxTokens, topP, maxModelLen). A key that is neither is refused with the list of those accepted, never ignored.

import type { SamplingParams } from '../sampling/params.js';
import { SamplingParamError, type RawSamplingParams } from '../sampling/validate.js';
import { engineOptions, type EngineOptions } from './options.js';

/** 'maxTokens' -> 'max_tokens', as a type. */
export type SnakeCase<S extends string> = S extends `${infer H}${infer T}`
  ? `${H extends Lowercase<H> ? H : `_${Lowercase<H>}`}${SnakeCase<T>}`
  : S;

/** 'maxTokens' -> 'max_tokens'. */
export function snakeCase(name: string): string {
  return name.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);
}

/** A record's keys in camelCase and in snake_case, each optional. */
export type CamelOrSnake<T> = { [K in keyof T]?: T[K] } & { [K in keyof T & string as SnakeCase<K>]?: T[K] };

type SamplingField = Exclude<keyof SamplingParams, 'structuredOutput'>;
type SamplingValues = Omit<{ [K in SamplingField]: SamplingParams[K] | null }, 'stop'> & { stop: string | string[] | null };

/** Sampling parameters as vLLM's SamplingParams names them (max_tokens, top_p, ...), or in camelCase. */
export type LLMSamplingParams = CamelOrSnake<SamplingValues>;

/** Engine options as vLLM's LLM(...) arguments name them (max_model_len, ...), or in camelCase. */
export type LLMOptions = CamelOrSnake<Omit<EngineOptions, 'model'>>;

const SAMPLING_FIELDS: readonly SamplingField[] = [
  'maxTokens', 'temperature', 'topP', 'topK', 'minP', 'repetitionPenalty', 'presencePenalty', 'frequencyPenalty',
  'logitBias', 'allowedTokenIds', 'badWords', 'seed', 'stopTokenIds', 'stop', 'includeStopStrInOutput', 'minTokens',
  'ignoreEos', 'logprobs', 'promptLogprobs', 'skipSpecialTokens', 'speculativeDecoding',
];

/** vLLM SamplingParams fields Quire's LLM class does not take (yet): named as such when given. */
const VLLM_UNSUPPORTED = new Set(['n', 'best_of', 'structured_outputs', 'guided_decoding', 'truncate_prompt_tokens',
  'detokenize', 'output_kind', 'spaces_between_special_tokens', 'logits_processors', 'extra_args', 'flat_logprobs',
  'allowed_token_ids_from_text']);

/** Maps each key, camelCase or snake_case, to its camelCase field; refuses unknown keys and a field given twice. */
function camelKeys<F extends string>(given: object, fields: readonly F[], what: string,
  unknown: (key: string) => string): Partial<Record<F, unknown>> {
  const byName = new Map<string, F>();
  for (const f of fields) {
    byName.set(f, f);
    byName.set(snakeCase(f), f);
  }
  const out: Partial<Record<F, unknown>> = {};
  const from: Partial<Record<F, string>> = {};
  for (const [key, value] of Object.entries(given)) {
    const field = byName.get(key);
    if (field === undefined) throw new TypeError(unknown(key));
    if (from[field] !== undefined) throw new TypeError(`${what}: ${from[field]} and ${key} are the same parameter; give one.`);
    from[field] = key;
    out[field] = value;
  }
  return out;
}

export function toRawSamplingParams(params: LLMSamplingParams | RawSamplingParams | null | undefined): RawSamplingParams {
  if (params === undefined || params === null) return {};
  if (typeof params !== 'object' || Array.isArray(params)) {
    throw new SamplingParamError('sampling_params', `sampling parameters must be an object, got ${JSON.stringify(params)}.`);
  }
  try {
    return camelKeys(params, SAMPLING_FIELDS, 'sampling parameters', (key) => VLLM_UNSUPPORTED.has(key)
      ? `sampling parameter ${key} (vLLM's) is not supported by Quire's LLM class.`
      : `unknown sampling parameter ${key}; the LLM class takes ${SAMPLING_FIELDS.map(snakeCase).join(', ')} `
        + '(or their camelCase forms).');
  } catch (e) {
    throw new SamplingParamError('sampling_params', (e as Error).message);
  }
}

const ENGINE_FIELDS = Object.keys(engineOptions({ model: '' })).filter((k) => k !== 'model') as (keyof EngineOptions)[];

export function toEngineOptions(options: LLMOptions | null | undefined): Partial<Omit<EngineOptions, 'model'>> {
  if (options === undefined || options === null) return {};
  return camelKeys(options, ENGINE_FIELDS, 'LLM options', (key) => `unknown engine option ${key}; the engine takes ${
    ENGINE_FIELDS.map(snakeCase).join(', ')} (or their camelCase forms).`) as Partial<Omit<EngineOptions, 'model'>>;
}
