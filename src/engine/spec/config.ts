// --speculative-config, as vLLM's SpeculativeConfig: a JSON object with vLLM's field names. Four methods run: n-gram
// (prompt lookup), a draft model (a smaller model with the target's tokenizer, in the same engine), mtp (the
// multi-token-prediction head a Qwen3.5 / Qwen3-Next checkpoint carries: spec/mtp-proposer.ts) and eagle3 (an EAGLE-3
// head of its own directory that reads three of the target's layers: spec/eagle3-load.ts); the others vLLM knows
// are named and refused, so a vLLM command line that asks for one fails at start-up saying which, never silently
// decodes without it.

/** The methods vLLM names; 'ngram', 'draft_model', 'mtp' and 'eagle3' are implemented. */
const KNOWN_METHODS = ['ngram', 'draft_model', 'eagle', 'eagle3', 'mtp', 'medusa', 'mlp_speculator'] as const;
/**
 * vLLM's older names of the mtp method for these families, which it still takes (with a deprecation warning) and
 * maps to "mtp"; so does Quire, silently.
 */
const MTP_ALIASES = ['qwen3_next_mtp', 'qwen3_5_mtp'] as const;
const FIELDS = ['method', 'model', 'num_speculative_tokens', 'prompt_lookup_min', 'prompt_lookup_max',
  'disable_by_batch_size'] as const;

interface CommonConfig {
  /** Tokens proposed per step (k): a verify step scores k + 1 positions of the request. */
  numSpeculativeTokens: number;
  /**
   * vLLM's disable_by_batch_size: no proposals in a step where this many requests or more are running (a large batch
   * is compute-bound already, and its verify rows would cost more than the accepted tokens save). Absent: always on.
   */
  disableByBatchSize?: number;
}

/** The n-gram proposer's configuration. */
export interface NgramConfig extends CommonConfig {
  method: 'ngram';
  /** The shortest and longest suffix n-gram looked up in the request's tokens. */
  promptLookupMin: number;
  promptLookupMax: number;
}

/**
 * A draft model's default disable_by_batch_size (vLLM has none): speculate only while one request runs. Measured in
 * session 32 (docs/perf-log.md) on a trained 208M target with the 6.5M demo model as its draft, one H200: k = 5 gave
 * 1.63x the tokens/s at one sequence and 0.61x to 0.97x at 2 to 64. Give the field to choose otherwise.
 */
export const DRAFT_MODEL_DISABLE_BY_BATCH_SIZE = 2;

/** A draft model's: its directory (or cached repo id), loaded beside the target on the same backend. */
export interface DraftModelConfig extends CommonConfig {
  method: 'draft_model';
  model: string;
}

/** The target's own multi-token-prediction head (mtp.* of its checkpoint), run on the target's backend. */
export interface MtpConfig extends CommonConfig {
  method: 'mtp';
}

/** An EAGLE-3 head: its directory (or cached repo id), run on the target's backend beside the target. */
export interface Eagle3Config extends CommonConfig {
  method: 'eagle3';
  model: string;
}

/** A checked speculative-decoding configuration. */
export type SpeculativeConfig = NgramConfig | DraftModelConfig | MtpConfig | Eagle3Config;

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
  // vLLM's older form names the method through "model": {"model": "ngram", ...}; a model path alone is a draft model
  const isNgramName = obj.model === 'ngram' || obj.model === '[ngram]';
  const named = obj.method ?? (isNgramName ? 'ngram' : typeof obj.model === 'string' ? 'draft_model' : undefined);
  if (named === undefined) fail('method is required (ngram, draft_model, mtp or eagle3)');
  const method = (MTP_ALIASES as readonly unknown[]).includes(named) ? 'mtp' : named;
  if (typeof method !== 'string' || !(KNOWN_METHODS as readonly string[]).includes(method)) {
    fail(`method ${JSON.stringify(named)} is unknown (vLLM's: ${[...KNOWN_METHODS, ...MTP_ALIASES].join(', ')})`);
  }
  if (method !== 'ngram' && method !== 'draft_model' && method !== 'mtp' && method !== 'eagle3') {
    fail(`method "${method}" is not supported yet (ngram, draft_model, mtp and eagle3 are; issue 41)`);
  }
  const k = positiveInt(obj, 'num_speculative_tokens');
  if (k === null) fail(`num_speculative_tokens is required for the ${method} method`);
  const disableByBatchSize = positiveInt(obj, 'disable_by_batch_size');
  const common = { numSpeculativeTokens: k, ...(disableByBatchSize !== null ? { disableByBatchSize } : {}) };
  if (method === 'mtp') {
    // vLLM's mtp draft is the target's own checkpoint; a model path would name another one
    if (obj.model !== undefined && obj.model !== null) {
      fail('model: the mtp method reads the head from the target\'s checkpoint (mtp.*); give no model');
    }
    for (const f of ['prompt_lookup_min', 'prompt_lookup_max']) if (obj[f] !== undefined) fail(`${f}: only the ngram method takes it`);
    return { method: 'mtp', ...common };
  }
  if (method === 'eagle3') {
    if (typeof obj.model !== 'string' || obj.model === '' || isNgramName) fail('model: the eagle3 method needs the EAGLE-3 head\'s directory');
    for (const f of ['prompt_lookup_min', 'prompt_lookup_max']) if (obj[f] !== undefined) fail(`${f}: only the ngram method takes it`);
    return { method: 'eagle3', model: obj.model, ...common };
  }
  if (method === 'draft_model') {
    if (typeof obj.model !== 'string' || obj.model === '' || isNgramName) fail('model: the draft_model method needs the draft model\'s directory');
    for (const f of ['prompt_lookup_min', 'prompt_lookup_max']) if (obj[f] !== undefined) fail(`${f}: only the ngram method takes it`);
    return { method: 'draft_model', model: obj.model, ...common,
      disableByBatchSize: common.disableByBatchSize ?? DRAFT_MODEL_DISABLE_BY_BATCH_SIZE };
  }
  if (obj.model !== undefined && !isNgramName) fail('model: the ngram method takes no model');
  // vLLM's defaults: both absent -> 5 and 5; one absent -> the other's value
  let min = positiveInt(obj, 'prompt_lookup_min');
  let max = positiveInt(obj, 'prompt_lookup_max');
  if (min === null && max === null) min = max = 5;
  min ??= max!;
  max ??= min;
  if (min > max) fail(`prompt_lookup_min (${min}) is larger than prompt_lookup_max (${max})`);
  return { method: 'ngram', promptLookupMin: min, promptLookupMax: max, ...common };
}
