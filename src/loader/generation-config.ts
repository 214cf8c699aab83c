import { existsSync } from 'node:fs';
import { ModelLoadError } from './errors.js';
import { readJsonFile } from './tokenizer.js';
import type { GenerationDefaults } from './types.js';

type Json = Record<string, unknown>;

function tokenIds(json: Json, field: string, file: string): number[] {
  const raw = json[field];
  if (raw === undefined || raw === null) return [];
  const list = Array.isArray(raw) ? raw : [raw];
  for (const id of list) {
    if (typeof id !== 'number' || !Number.isSafeInteger(id) || id < 0) {
      throw new ModelLoadError(file, `field "${field}" must be a token id or a list of them, got ${JSON.stringify(raw)}`);
    }
  }
  return list as number[];
}

function optionalNumber(json: Json, field: string, file: string): number | undefined {
  const raw = json[field];
  if (raw === undefined || raw === null) return undefined;
  if (typeof raw !== 'number' || !Number.isFinite(raw)) throw new ModelLoadError(file, `field "${field}" must be a number, got ${JSON.stringify(raw)}`);
  return raw;
}

/** generation_config.json contents -> defaults (sampling fields read as vLLM does, whatever do_sample says). */
export function parseGenerationConfig(json: Json, file: string): GenerationDefaults {
  const bos = tokenIds(json, 'bos_token_id', file);
  const out: GenerationDefaults = { eosTokenIds: tokenIds(json, 'eos_token_id', file), bosTokenId: bos[0] ?? null };
  const fields: [keyof GenerationDefaults, string][] = [
    ['temperature', 'temperature'],
    ['topP', 'top_p'],
    ['topK', 'top_k'],
    ['minP', 'min_p'],
    ['repetitionPenalty', 'repetition_penalty'],
  ];
  for (const [key, field] of fields) {
    const v = optionalNumber(json, field, file);
    if (v !== undefined) (out as unknown as Record<string, number>)[key] = v;
  }
  return out;
}

/** The optional generation_config.json; absent -> no defaults. */
export function loadGenerationConfig(file: string): GenerationDefaults {
  if (!existsSync(file)) return { eosTokenIds: [], bosTokenId: null };
  return parseGenerationConfig(readJsonFile(file), file);
}
