// Default sampling parameters of a served model, as vLLM's --generation-config sets them: "auto" takes the
// model's generation_config.json (temperature, top_p, top_k, min_p, repetition_penalty: the values its authors
// recommend), "vllm" none (the OpenAI defaults), a folder that folder's generation_config.json; then
// --override-generation-config's JSON on top. A request's own fields always win.

import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { loadGenerationConfig } from '../loader/generation-config.js';
import type { SamplingParams } from '../sampling/params.js';

export type SamplingDefaults = Partial<Pick<SamplingParams, 'temperature' | 'topP' | 'topK' | 'minP' | 'repetitionPenalty'>>;

/** generation_config.json's field names of the defaults. */
const FIELDS: [keyof SamplingDefaults, string][] = [
  ['temperature', 'temperature'], ['topP', 'top_p'], ['topK', 'top_k'], ['minP', 'min_p'], ['repetitionPenalty', 'repetition_penalty'],
];

export class SamplingDefaultsError extends Error {}

/** --override-generation-config's value: a JSON object of generation_config field names and numbers. */
export function parseGenerationOverride(json: string): SamplingDefaults {
  let o: unknown;
  try {
    o = JSON.parse(json);
  } catch {
    o = undefined;
  }
  if (o === null || typeof o !== 'object' || Array.isArray(o)) {
    throw new SamplingDefaultsError(`--override-generation-config takes a JSON object, e.g. '{"temperature": 0.5}'; got ${json}`);
  }
  const out: SamplingDefaults = {};
  for (const [name, v] of Object.entries(o)) {
    const field = FIELDS.find(([, f]) => f === name);
    if (field === undefined) {
      throw new SamplingDefaultsError(`--override-generation-config: "${name}" is not one of ${FIELDS.map(([, f]) => f).join(', ')}`);
    }
    if (typeof v !== 'number' || !Number.isFinite(v)) throw new SamplingDefaultsError(`--override-generation-config: "${name}" must be a number`);
    out[field[0]] = v;
  }
  return out;
}

/**
 * The defaults for `mode` ("auto", "vllm", or a folder holding a generation_config.json) over the model in
 * `modelDir`, with `override` on top.
 */
export function samplingDefaults(mode: string, modelDir: string, override: SamplingDefaults = {}): SamplingDefaults {
  const out: SamplingDefaults = {};
  if (mode !== 'vllm') {
    const file = join(mode === 'auto' ? modelDir : mode, 'generation_config.json');
    if (mode !== 'auto' && !existsSync(file)) throw new SamplingDefaultsError(`--generation-config ${mode}: no generation_config.json there`);
    const g = loadGenerationConfig(file);
    for (const [key] of FIELDS) if (g[key] !== undefined) out[key] = g[key];
  }
  return { ...out, ...override };
}

/** The defaults in generation_config.json's names, for the start-up log line. */
export function describeSamplingDefaults(d: SamplingDefaults): string {
  return JSON.stringify(Object.fromEntries(FIELDS.filter(([k]) => d[k] !== undefined).map(([k, f]) => [f, d[k]])));
}
