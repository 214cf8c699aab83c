// --speculative-config, as vLLM's SpeculativeConfig: a JSON object with vLLM's field names. Only the n-gram
// (prompt lookup) method runs so far; the others vLLM knows are named and refused, so a vLLM command line that
// asks for one fails at start-up saying which, never silently decodes without it.

/** The methods vLLM names; only 'ngram' is implemented. */
const KNOWN_METHODS = ['ngram', 'draft_model', 'eagle', 'eagle3', 'mtp', 'medusa', 'mlp_speculator'] as const;
const FIELDS = ['method', 'model', 'num_speculative_tokens', 'prompt_lookup_min', 'prompt_lookup_max',
  'disable_by_batch_size'] as const;

/** A checked speculative-decoding configuration (the n-gram proposer's). */
export interface SpeculativeConfig {
  method: 'ngram';
  /** Tokens proposed per step (k): a verify step scores k + 1 positions of the request. */
  numSpeculativeTokens: number;
  /** The shortest and longest suffix n-gram looked up in the request's tokens. */
  promptLookupMin: number;
  promptLookupMax: number;
  /**
   * vLLM's disable_by_batch_size: no proposals in a step where this many requests or more are running (a large batch
   * is compute-bound already, and its verify rows would cost more than the accepted tokens save). Absent: always on.
   */
  disableByBatchSize?: number;
}

/** What a program may give: vLLM's dict (snake_case keys), its camelCase form, or a parsed config. */
export type SpeculativeConfigInput = SpeculativeConfig | {
  method?: string; model?: string; num_speculative_tokens?: number; prompt_lookup_min?: number; prompt_lookup_max?: number;
  disable_by_batch_size?: number;
};

/** Thrown for a configuration the engine cannot run; the message names the field. */
export class SpeculativeConfigError extends Error {}

function fail(msg: string): never {
  throw new SpeculativeConfigError(`--speculative-config: ${msg}`);
}

function positiveInt(o: Record<string, unknown>, field: string): number | null {
  const v = o[field];
  if (v === undefined || v === null) return null;
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 1) fail(`${field} must be a positive integer, got ${JSON.stringify(v)}`);
  return v;
}

/** A JSON string or an already parsed object (the LLM class's speculative_config) -> the checked config. */
export function parseSpeculativeConfig(given: string | SpeculativeConfigInput | Record<string, unknown>): SpeculativeConfig {
  let o: unknown = given;
  if (typeof given === 'string') {
    try {
      o = JSON.parse(given);
    } catch (e) {
      fail(`not JSON (${(e as Error).message})`);
    }
  }
  if (typeof o !== 'object' || o === null || Array.isArray(o)) fail('expected a JSON object such as {"method": "ngram", "num_speculative_tokens": 4}');
  // camelCase keys are the same fields (the LLM class takes either; a parsed config parses to itself)
  const obj = Object.fromEntries(Object.entries(o as Record<string, unknown>)
    .map(([key, v]) => [key.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`), v]));
  const unknown = Object.keys(obj).filter((k) => !(FIELDS as readonly string[]).includes(k));
  if (unknown.length > 0) fail(`unknown or unsupported field ${unknown.map((k) => JSON.stringify(k)).join(', ')} (known: ${FIELDS.join(', ')})`);
  // vLLM's older form names the method through "model": {"model": "ngram", ...}
  const method = obj.method ?? (obj.model === 'ngram' || obj.model === '[ngram]' ? 'ngram' : undefined);
  if (method === undefined) fail('method is required (ngram)');
  if (typeof method !== 'string' || !(KNOWN_METHODS as readonly string[]).includes(method)) {
    fail(`method ${JSON.stringify(method)} is unknown (vLLM's: ${KNOWN_METHODS.join(', ')})`);
  }
  if (method !== 'ngram') fail(`method "${method}" is not supported yet (only ngram is; issue 41)`);
  if (obj.model !== undefined && obj.model !== 'ngram' && obj.model !== '[ngram]') fail('model: the ngram method takes no model');
  const k = positiveInt(obj, 'num_speculative_tokens');
  if (k === null) fail('num_speculative_tokens is required for the ngram method');
  // vLLM's defaults: both absent -> 5 and 5; one absent -> the other's value
  let min = positiveInt(obj, 'prompt_lookup_min');
  let max = positiveInt(obj, 'prompt_lookup_max');
  if (min === null && max === null) min = max = 5;
  min ??= max!;
  max ??= min;
  if (min > max) fail(`prompt_lookup_min (${min}) is larger than prompt_lookup_max (${max})`);
  const disableByBatchSize = positiveInt(obj, 'disable_by_batch_size');
  return { method: 'ngram', numSpeculativeTokens: k, promptLookupMin: min, promptLookupMax: max,
    ...(disableByBatchSize !== null ? { disableByBatchSize } : {}) };
}
