// How a pooling runner (vLLM's `--runner pooling`, `--task embed`) turns a prompt into an embedding: the pooling and
// normalization a sentence-transformers model directory declares (modules.json, its Pooling module's config.json),
// vLLM's defaults for a decoder without them (the last token, normalized), and `--pooler-config` over both.
//
// Quire pools the last token only (Qwen3-Embedding, gte-Qwen2, e5-mistral and most decoder embedders); a model
// that asks for another pooling is refused, naming the file and field.

import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { readJsonFile } from './tokenizer.js';

export type PoolingType = 'LAST' | 'MEAN' | 'CLS' | 'ALL' | 'STEP';

export interface PoolerConfig {
  poolingType: 'LAST';
  normalize: boolean;
  /** Output sizes a request may ask for (`dimensions`): a Matryoshka model's; null: any up to hidden; []: none. */
  matryoshkaDimensions: number[] | null;
}

const ST_POOLING_MODES: [string, PoolingType][] = [
  ['pooling_mode_lasttoken', 'LAST'], ['pooling_mode_mean_tokens', 'MEAN'], ['pooling_mode_cls_token', 'CLS'],
  ['pooling_mode_max_tokens', 'ALL'], ['pooling_mode_mean_sqrt_len_tokens', 'MEAN'],
];

function readJson(path: string): unknown {
  try {
    return JSON.parse(readFileSync(path, 'utf8'));
  } catch (e) {
    throw new Error(`${path}: not JSON (${(e as Error).message})`);
  }
}

/** What the directory's sentence-transformers files declare (null fields: they say nothing). */
export function sentenceTransformersPooling(dir: string): { poolingType: PoolingType | null; normalize: boolean | null; from: string | null } {
  const modulesPath = join(dir, 'modules.json');
  if (!existsSync(modulesPath)) return { poolingType: null, normalize: null, from: null };
  const modules = readJson(modulesPath);
  if (!Array.isArray(modules)) throw new Error(`${modulesPath}: expected a list of modules`);
  const typeOf = (m: unknown) => (typeof m === 'object' && m !== null ? String((m as { type?: unknown }).type ?? '') : '');
  const normalize = modules.some((m) => typeOf(m).endsWith('.Normalize'));
  const pooling = modules.find((m) => typeOf(m).endsWith('.Pooling')) as { path?: unknown } | undefined;
  if (pooling === undefined) return { poolingType: null, normalize, from: modulesPath };
  const configPath = join(dir, String(pooling.path ?? ''), 'config.json');
  if (!existsSync(configPath)) return { poolingType: null, normalize, from: modulesPath };
  const config = readJson(configPath) as Record<string, unknown>;
  const mode = ST_POOLING_MODES.find(([field]) => config[field] === true);
  return { poolingType: mode?.[1] ?? null, normalize, from: mode ? `${configPath} (${mode[0]})` : modulesPath };
}

/** The pooler of a model directory: resolvePoolerConfig over its config.json (with --hf-overrides' fields over it). */
export function modelPoolerConfig(dir: string, flag: Record<string, unknown> | null,
  hfOverrides: Record<string, unknown> | null = null): PoolerConfig {
  return resolvePoolerConfig(dir, { ...readJsonFile(join(dir, 'config.json')) as Record<string, unknown>, ...hfOverrides }, flag);
}

/**
 * The pooler of `dir`'s model: `--pooler-config` (vLLM's JSON: pooling_type, normalize) over the
 * sentence-transformers files over vLLM's decoder default (LAST, normalized). `hfConfig` is config.json (Matryoshka
 * fields: is_matryoshka, matryoshka_dimensions).
 */
export function resolvePoolerConfig(dir: string, hfConfig: Record<string, unknown>, flag: Record<string, unknown> | null): PoolerConfig {
  const st = sentenceTransformersPooling(dir);
  const known = new Set(['pooling_type', 'normalize']);
  for (const k of Object.keys(flag ?? {})) {
    if (!known.has(k)) throw new Error(`--pooler-config: field "${k}" is not supported (supported: ${[...known].join(', ')})`);
  }
  const flagType = flag?.pooling_type;
  if (flagType !== undefined && (typeof flagType !== 'string' || !['LAST', 'MEAN', 'CLS', 'ALL', 'STEP'].includes(flagType.toUpperCase()))) {
    throw new Error(`--pooler-config: pooling_type must be one of LAST, MEAN, CLS, ALL, STEP, got ${JSON.stringify(flagType)}`);
  }
  const poolingType = (flagType as string | undefined)?.toUpperCase() as PoolingType | undefined ?? st.poolingType ?? 'LAST';
  if (poolingType !== 'LAST') {
    const from = flagType !== undefined ? '--pooler-config pooling_type' : st.from;
    throw new Error(`${from}: ${poolingType} pooling is not supported; Quire pools the last token (LAST)`);
  }
  const flagNormalize = flag?.normalize;
  if (flagNormalize !== undefined && typeof flagNormalize !== 'boolean') {
    throw new Error(`--pooler-config: normalize must be true or false, got ${JSON.stringify(flagNormalize)}`);
  }
  const normalize = (flagNormalize as boolean | undefined) ?? st.normalize ?? true;
  const dims = hfConfig.matryoshka_dimensions;
  if (dims !== undefined && dims !== null && (!Array.isArray(dims) || !dims.every((d) => Number.isInteger(d) && d > 0))) {
    throw new Error(`${join(dir, 'config.json')}: matryoshka_dimensions must be a list of positive integers`);
  }
  const matryoshkaDimensions = Array.isArray(dims) ? dims as number[] : hfConfig.is_matryoshka === true ? null : [];
  return { poolingType: 'LAST', normalize, matryoshkaDimensions };
}
