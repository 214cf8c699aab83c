// Fixed serving workloads (WORKLOADS.md W3, W5) and custom ones. A workload is
// plain data: levels of requests; nonces are applied when a request is sent, so
// every round and every target gets fresh ones.

import { readFileSync } from 'node:fs';
import { randomBytes } from 'node:crypto';

export type PromptFormat = 'text' | 'ids';
/** per-request: a fresh nonce on every request; per-level: one nonce shared by a level's run (keeps a shared prefix shared). */
export type NonceMode = 'per-request' | 'per-level' | 'none';

export interface RequestSpec {
  prompt: string | number[];
  maxTokens: number;
  /** Exact for id prompts; about one token a word for text prompts. */
  approxPromptTokens: number;
}

export interface LevelSpec {
  name: string;
  /** Most requests in flight at once; null: unbounded (rate-driven). */
  concurrency: number | null;
  /** Poisson arrivals at this mean rate; null: send as soon as a slot is free. */
  requestRatePerS: number | null;
  /** Gamma-shaped arrivals at requestRatePerS (vLLM's --burstiness): 1 (or absent) Poisson, lower burstier. */
  burstiness?: number;
  nonce: NonceMode;
  ignoreEos: boolean;
  requests: RequestSpec[];
}

export interface Workload {
  name: string;
  description: string;
  promptFormat: PromptFormat;
  levels: LevelSpec[];
}

export type Length = number | { min: number; max: number };

/** mulberry32 (shared with the random-weight models): seeded, good enough to pick words and lengths. */
import { seededRandom as seededRng } from '../model/random-weights.js';

export { seededRng };

const WORDS = (
  'the of and to in is was for on are with as be at by this had not but from or have an they which one you were her all ' +
  'she there would their we him been has when who will more no if out so said what up its about into than them can only ' +
  'other new some could time these two may then do first any my now such like our over man me even most made after also ' +
  'did many before must through back years where much your way well down should because each just those people how too ' +
  'little state good very make world still own see men work long get here between both life being under never day same ' +
  'another know while last might us great old year off come since against go came right used take three house water ' +
  'small found thought went say part once general high upon school every place around large again name city'
).split(' ');

export interface PromptMaker {
  format: PromptFormat;
  vocabSize: number;
  rng: () => number;
}

function pickLength(len: Length, rng: () => number): number {
  if (typeof len === 'number') return len;
  return len.min + Math.floor(rng() * (len.max - len.min + 1));
}

/** A prompt of about `numTokens` tokens: words for text, ids in [100, vocabSize - 300) for ids. */
export function makePrompt(maker: PromptMaker, numTokens: number): string | number[] {
  if (maker.format === 'ids') {
    const span = Math.max(1, maker.vocabSize - 400);
    return Array.from({ length: numTokens }, () => 100 + Math.floor(maker.rng() * span));
  }
  const words: string[] = [];
  for (let i = 0; i < numTokens; i++) words.push(WORDS[Math.floor(maker.rng() * WORDS.length)]!);
  return words.join(' ');
}

export function concatPrompts(a: string | number[], b: string | number[]): string | number[] {
  if (typeof a === 'string' && typeof b === 'string') return `${a} ${b}`;
  if (Array.isArray(a) && Array.isArray(b)) return [...a, ...b];
  throw new TypeError('cannot join a text prompt with an id prompt');
}

export interface Nonce {
  text: string;
  ids: number[];
}

/** Words a text nonce is drawn from: 4 of them, about a token each (230^4: 2.8e9 nonces). */
const NONCE_WORDS = 4;

export function freshNonce(vocabSize: number): Nonce {
  const bytes = randomBytes(8);
  const span = Math.max(1, vocabSize - 400);
  const words = Array.from({ length: NONCE_WORDS }, (_, i) => WORDS[bytes.readUInt16LE(i * 2) % WORDS.length]!);
  return { text: words.join(' '), ids: Array.from({ length: 4 }, (_, i) => 100 + (bytes.readUInt16LE(i * 2) % span)) };
}

/**
 * Puts the nonce at the very start, so no prefix of the prompt is shared with an earlier request. It replaces the
 * prompt's first words (ids), so the prompt keeps its length: --prompt-len 64 sends 64 tokens, not 64 and a nonce.
 */
export function applyNonce(prompt: string | number[], nonce: Nonce): string | number[] {
  if (typeof prompt === 'string') {
    const words = prompt.split(' ');
    const numNonceWords = nonce.text.split(' ').length;
    return words.length >= numNonceWords ? [nonce.text, ...words.slice(numNonceWords)].join(' ') : `${nonce.text} ${prompt}`;
  }
  return [...nonce.ids, ...prompt.slice(nonce.ids.length)];
}

export interface W3Options {
  concurrencies?: number[];
  promptTokens?: number;
  outputTokens?: number;
  requestsPerConcurrency?: number;
  minRequests?: number;
  nonce?: boolean;
  promptFormat?: PromptFormat;
  vocabSize?: number;
  seed?: number;
}

export function buildW3(opts: W3Options = {}): Workload {
  const concurrencies = opts.concurrencies ?? [1, 8, 32, 128, 256];
  const promptTokens = opts.promptTokens ?? 1024;
  const outputTokens = opts.outputTokens ?? 128;
  const maker: PromptMaker = { format: opts.promptFormat ?? 'text', vocabSize: opts.vocabSize ?? 32000, rng: seededRng(opts.seed ?? 3) };
  const levels = concurrencies.map((c): LevelSpec => {
    const numRequests = Math.max(opts.minRequests ?? 16, (opts.requestsPerConcurrency ?? 4) * c);
    return {
      name: `c${c}`,
      concurrency: c,
      requestRatePerS: null,
      nonce: opts.nonce === false ? 'none' : 'per-request',
      ignoreEos: true,
      requests: Array.from({ length: numRequests }, () => ({
        prompt: makePrompt(maker, promptTokens),
        maxTokens: outputTokens,
        approxPromptTokens: promptTokens,
      })),
    };
  });
  return {
    name: 'W3',
    description: `serving sweep: prompt ${promptTokens}, output ${outputTokens}, concurrency ${concurrencies.join('/')}`,
    promptFormat: maker.format,
    levels,
  };
}

export interface W5Options {
  numRequests?: number;
  systemPromptTokens?: number;
  suffixTokens?: number;
  outputTokens?: number;
  concurrency?: number;
  nonce?: boolean;
  promptFormat?: PromptFormat;
  vocabSize?: number;
  seed?: number;
}

export function buildW5(opts: W5Options = {}): Workload {
  const numRequests = opts.numRequests ?? 64;
  const systemPromptTokens = opts.systemPromptTokens ?? 2000;
  const suffixTokens = opts.suffixTokens ?? 100;
  const outputTokens = opts.outputTokens ?? 64;
  const concurrency = opts.concurrency ?? 16;
  const maker: PromptMaker = { format: opts.promptFormat ?? 'text', vocabSize: opts.vocabSize ?? 32000, rng: seededRng(opts.seed ?? 5) };
  const system = makePrompt(maker, systemPromptTokens);
  const requests = Array.from({ length: numRequests }, () => ({
    prompt: concatPrompts(system, makePrompt(maker, suffixTokens)),
    maxTokens: outputTokens,
    approxPromptTokens: systemPromptTokens + suffixTokens,
  }));
  return {
    name: 'W5',
    description: `shared prefix: ${numRequests} requests, system ${systemPromptTokens} + suffix ${suffixTokens}, output ${outputTokens}, concurrency ${concurrency}`,
    promptFormat: maker.format,
    levels: [{ name: `c${concurrency}`, concurrency, requestRatePerS: null, nonce: opts.nonce === false ? 'none' : 'per-level', ignoreEos: true, requests }],
  };
}

export interface JsonlPrompt {
  prompt: string | number[];
  maxTokens?: number;
}

/** Reads `{"prompt": ..., "max_tokens": ...}` lines; blank lines are skipped. */
export function parseJsonlPrompts(text: string, source = 'jsonl'): JsonlPrompt[] {
  const out: JsonlPrompt[] = [];
  text.split('\n').forEach((line, i) => {
    if (line.trim() === '') return;
    let obj: { prompt?: unknown; max_tokens?: unknown };
    try {
      obj = JSON.parse(line) as typeof obj;
    } catch (e) {
      throw new Error(`${source}:${i + 1}: not JSON (${(e as Error).message})`);
    }
    const p = obj.prompt;
    if (typeof p !== 'string' && !(Array.isArray(p) && p.every((x) => Number.isInteger(x)))) {
      throw new Error(`${source}:${i + 1}: "prompt" must be a string or a list of token ids`);
    }
    if (obj.max_tokens !== undefined && !(Number.isInteger(obj.max_tokens) && (obj.max_tokens as number) > 0)) {
      throw new Error(`${source}:${i + 1}: "max_tokens" must be a positive integer`);
    }
    out.push({ prompt: p as string | number[], ...(obj.max_tokens === undefined ? {} : { maxTokens: obj.max_tokens as number }) });
  });
  return out;
}

export interface CustomWorkloadOptions {
  name?: string;
  numRequests: number;
  promptTokens?: Length;
  outputTokens: Length;
  /** Prompts from a JSONL file instead of generated ones (cycled when fewer than numRequests). */
  jsonlPath?: string;
  /** One level per concurrency, each sending the same requests. */
  concurrency?: number | readonly number[];
  requestRatePerS?: number;
  /** With requestRatePerS: the arrivals' gamma shape (1: Poisson). */
  burstiness?: number;
  ignoreEos?: boolean;
  nonce?: boolean;
  promptFormat?: PromptFormat;
  vocabSize?: number;
  seed?: number;
}

export function buildCustomWorkload(opts: CustomWorkloadOptions): Workload {
  if (opts.concurrency === undefined && opts.requestRatePerS === undefined) {
    throw new Error('a custom workload needs a concurrency, a request rate, or both');
  }
  if (opts.burstiness !== undefined && opts.requestRatePerS === undefined) {
    throw new Error('a burstiness shapes the arrivals of a request rate: give one too');
  }
  const maker: PromptMaker = { format: opts.promptFormat ?? 'text', vocabSize: opts.vocabSize ?? 32000, rng: seededRng(opts.seed ?? 7) };
  const fromFile = opts.jsonlPath ? parseJsonlPrompts(readFileSync(opts.jsonlPath, 'utf8'), opts.jsonlPath) : null;
  if (fromFile && fromFile.length === 0) throw new Error(`${opts.jsonlPath}: no prompts`);
  const requests = Array.from({ length: opts.numRequests }, (_, i): RequestSpec => {
    const maxTokens = pickLength(opts.outputTokens, maker.rng);
    if (fromFile) {
      const p = fromFile[i % fromFile.length]!;
      const approx = typeof p.prompt === 'string' ? p.prompt.split(/\s+/).length : p.prompt.length;
      return { prompt: p.prompt, maxTokens: p.maxTokens ?? maxTokens, approxPromptTokens: approx };
    }
    const numTokens = pickLength(opts.promptTokens ?? 256, maker.rng);
    return { prompt: makePrompt(maker, numTokens), maxTokens, approxPromptTokens: numTokens };
  });
  const burstiness = opts.burstiness === 1 ? undefined : opts.burstiness;  // 1: the Poisson level, as without one
  const rateName = opts.requestRatePerS !== undefined ? `r${opts.requestRatePerS}${burstiness ? `b${burstiness}` : ''}` : '';
  const concurrencies: (number | null)[] = opts.concurrency === undefined ? [null]
    : typeof opts.concurrency === 'number' ? [opts.concurrency] : [...opts.concurrency];
  const levels = concurrencies.map((c): LevelSpec => ({
    name: rateName !== '' && c !== null && concurrencies.length > 1 ? `${rateName}c${c}` : rateName || `c${c}`,
    concurrency: c,
    requestRatePerS: opts.requestRatePerS ?? null,
    ...(burstiness !== undefined ? { burstiness } : {}),
    nonce: opts.nonce ? 'per-request' : 'none',
    ignoreEos: opts.ignoreEos ?? true,
    requests,
  }));
  const shown = concurrencies.filter((c) => c !== null);
  return {
    name: opts.name ?? 'custom',
    description: `custom: ${opts.numRequests} requests${levels.length > 1 ? ' per level' : ''}`
      + `${opts.jsonlPath ? ` from ${opts.jsonlPath}` : ''}${shown.length > 0 ? `, concurrency ${shown.join('/')}` : ''}`
      + `${rateName ? `, ${opts.requestRatePerS} requests/s` : ''}`,
    promptFormat: fromFile && Array.isArray(fromFile[0]!.prompt) ? 'ids' : maker.format,
    levels,
  };
}

/** Exponential inter-arrival gaps (ms) of a Poisson process at `ratePerS`. */
export function poissonGapsMs(numRequests: number, ratePerS: number, rng: () => number): number[] {
  return Array.from({ length: numRequests }, () => (-Math.log(1 - rng()) / ratePerS) * 1000);
}

/**
 * Inter-arrival gaps (ms) at a mean `ratePerS` as vLLM's benchmark draws them: gamma with shape `burstiness` and
 * scale 1 / (rate burstiness), so the mean gap is 1 / rate whatever the shape and its coefficient of variation
 * 1 / sqrt(burstiness). Burstiness 1 is the Poisson process (poissonGapsMs, the same draws).
 */
export function arrivalGapsMs(numRequests: number, ratePerS: number, rng: () => number, burstiness = 1): number[] {
  if (!(burstiness > 0) || !Number.isFinite(burstiness)) throw new Error(`burstiness ${burstiness}: expected a positive number`);
  if (burstiness === 1) return poissonGapsMs(numRequests, ratePerS, rng);
  const scaleMs = 1000 / (ratePerS * burstiness);
  return Array.from({ length: numRequests }, () => gammaSample(burstiness, rng) * scaleMs);
}

/** A standard normal draw (Box-Muller). */
function normalSample(rng: () => number): number {
  return Math.sqrt(-2 * Math.log(1 - rng())) * Math.cos(2 * Math.PI * rng());
}

/** A Gamma(shape, 1) draw: Marsaglia and Tsang's method, boosted by u^(1/shape) below shape 1. */
function gammaSample(shape: number, rng: () => number): number {
  if (shape < 1) return gammaSample(shape + 1, rng) * Math.pow(1 - rng(), 1 / shape);
  const d = shape - 1 / 3;
  const c = 1 / Math.sqrt(9 * d);
  for (;;) {
    const x = normalSample(rng);
    const v = (1 + c * x) ** 3;
    if (v <= 0) continue;
    if (Math.log(1 - rng()) < 0.5 * x * x + d - d * v + d * Math.log(v)) return d * v;
  }
}

/** W1 (`offline-256.json`): `{requests: [{prompt_token_ids, max_tokens}]}`, all sent at once. */
export function parseOfflineWorkload(text: string, source = 'offline workload'): Workload {
  const obj = JSON.parse(text) as { name?: string; description?: string; requests?: { prompt_token_ids?: unknown; max_tokens?: unknown }[] };
  if (!Array.isArray(obj.requests) || obj.requests.length === 0) throw new Error(`${source}: expected {"requests": [...]}`);
  const requests = obj.requests.map((r, i): RequestSpec => {
    const ids = r.prompt_token_ids;
    if (!Array.isArray(ids) || !ids.every((x) => Number.isInteger(x)) || !Number.isInteger(r.max_tokens)) {
      throw new Error(`${source}: request ${i} needs prompt_token_ids (ints) and max_tokens (int)`);
    }
    return { prompt: ids as number[], maxTokens: r.max_tokens as number, approxPromptTokens: ids.length };
  });
  return {
    name: obj.name ?? 'W1',
    description: obj.description ?? `${requests.length} requests, all at once`,
    promptFormat: 'ids',
    levels: [{ name: `all${requests.length}`, concurrency: null, requestRatePerS: null, nonce: 'none', ignoreEos: true, requests }],
  };
}

export function loadOfflineWorkload(path: string): Workload {
  return parseOfflineWorkload(readFileSync(path, 'utf8'), path);
}
