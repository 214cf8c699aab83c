// A reference dump from a peer server (llama.cpp's llama-server, native POST /completion): the peer's greedy
// tokens for each gate prompt and, at each step, its top-k next-token logprobs, in the format `quire gate
// --reference` reads (tools/reference's, with `top` steps in place of full `logits`). Quire and the peer read the
// same GGUF file; the prompts go as token ids so that both see the same sequence whatever their tokenizers do.

import type { GatePromptSet } from './gate-transcript.js';

/** One step of the peer's distribution: its top-k (token, logprob), most likely first. */
export interface PeerTopEntry {
  tokenId: number;
  logprob: number;
}

export interface PeerDumpPrompt {
  id: string;
  prompt: number[];
  /** The peer's greedy tokens. */
  greedy: number[];
  /** steps[k]: the distribution at `position` = prompt.length + k, i.e. after greedy[0..k). */
  steps: { position: number; top: PeerTopEntry[] }[];
}

export interface PeerDump {
  /** Where the dump came from, for the report beside any figure. */
  peer: { kind: 'llama.cpp'; url: string; nProbs: number; ignoreEos: boolean; props?: Record<string, unknown> };
  prompts: PeerDumpPrompt[];
}

export interface PeerDumpOptions {
  /** llama-server's base URL, e.g. http://127.0.0.1:8080 (a URL ending in /completion is used as is). */
  url: string;
  prompts: GatePromptSet;
  /** Text prompts -> token ids with the tokenizer Quire loads for the model (the engine's own encode). */
  encode: (text: string) => number[];
  /** Top-k per step (llama-server's n_probs; Quire's gate asks its engine for 20). */
  nProbs?: number;
  /** Keep generating past EOS, as the transcript gate does (default true). */
  ignoreEos?: boolean;
  timeoutMs?: number;
  log?: (line: string) => void;
}

/**
 * llama.cpp writes log(0) as the float's lowest value (JSON has no -inf): such an entry carries no mass and would
 * only make max-abs-error meaningless, so it is left out.
 */
const LOG_ZERO = -1e30;

export function completionUrl(url: string): string {
  const base = url.replace(/\/+$/, '');
  return base.endsWith('/completion') ? base : `${base}/completion`;
}

/**
 * The /completion request body for llama.cpp v0.5.0 (tools/server/README.md, server-schema.cpp). `samplers:
 * ["temperature"]` with temperature 0 is plain argmax: no penalties, DRY or top-p in the chain. The probabilities
 * are pre-sampling (post_sampling_probs false: a softmax of the raw logits, get_token_probabilities); after a
 * greedy chain the post-sampling ones would be one token at 1.0. backend_sampling false (its default) so the logits
 * read are the whole vocabulary's, not a sampled candidate list. ignore_eos puts a -inf bias on end-of-generation
 * tokens in the sampler only: the reported logprobs still show them. cache_prompt false so each prompt is evaluated
 * whole (logits depend on batch shape, per the README).
 */
export function llamaCppCompletionBody(prompt: number[], nPredict: number, nProbs: number, ignoreEos: boolean): Record<string, unknown> {
  return {
    prompt, n_predict: nPredict, temperature: 0, samplers: ['temperature'], n_probs: nProbs, post_sampling_probs: false,
    backend_sampling: false, return_tokens: true, cache_prompt: false, ignore_eos: ignoreEos, stream: false,
  };
}

function fail(where: string, field: string, what: string): never {
  throw new Error(`llama.cpp /completion response${where ? ` ${where}` : ''}: ${field} ${what}`);
}

function isObject(x: unknown): x is Record<string, unknown> {
  return typeof x === 'object' && x !== null && !Array.isArray(x);
}

function tokenId(x: unknown, where: string, field: string): number {
  if (!Number.isInteger(x) || (x as number) < 0) fail(where, field, `is ${JSON.stringify(x)}, not a token id`);
  return x as number;
}

/** One step's top list: `top_logprobs` of `logprob`s, or (post-sampling) `top_probs` of `prob`s, taken as logs. */
function parseTop(entry: Record<string, unknown>, where: string, nProbs: number): PeerTopEntry[] {
  const probs = 'top_logprobs' in entry ? entry.top_logprobs : entry.top_probs;
  const listName = 'top_logprobs' in entry ? 'top_logprobs' : 'top_probs';
  if (!Array.isArray(probs)) fail(where, 'top_logprobs', 'is missing (was n_probs sent?)');
  // The pre-sampling list holds exactly n_probs entries (min with the vocabulary); a shorter one is the post-sampling
  // list of a greedy chain, one token at 1.0, which says nothing of the distribution.
  if (probs.length < Math.min(nProbs, 2)) {
    fail(where, listName, `lists ${probs.length} of ${nProbs} requested entries: post-sampling probabilities? the dump needs post_sampling_probs false`);
  }
  const out: PeerTopEntry[] = [];
  for (const [j, t] of probs.entries()) {
    const at = `${where} ${listName}[${j}]`;
    if (!isObject(t)) fail(at, 'entry', 'is not an object');
    const id = tokenId(t.id, at, 'id');
    let logprob: number;
    if (typeof t.logprob === 'number') logprob = t.logprob;
    else if (typeof t.prob === 'number' && t.prob >= 0 && t.prob <= 1) logprob = Math.log(t.prob);
    else fail(at, 'logprob', `is missing (nor a prob in [0, 1]): ${JSON.stringify(t)}`);
    if (!(logprob <= 1e-6)) fail(at, 'logprob', `is ${logprob}, not a log probability`);
    if (logprob > LOG_ZERO) out.push({ tokenId: id, logprob: Math.min(0, logprob) });
  }
  return out;
}

/** The greedy tokens and per-step top lists of one /completion response, checked field by field. */
export function parseLlamaCppCompletion(body: unknown, opts: { nPredict: number; nProbs: number; ignoreEos: boolean }): { greedy: number[]; tops: PeerTopEntry[][] } {
  if (!isObject(body)) fail('', 'body', 'is not a JSON object');
  if (isObject(body.error)) fail('', 'error', String(body.error.message ?? JSON.stringify(body.error)));
  const tokens = body.tokens;
  if (!Array.isArray(tokens)) fail('', 'tokens', 'is missing (was return_tokens sent? llama-server older than v0.5.0?)');
  const probs = body.completion_probabilities;
  if (!Array.isArray(probs)) fail('', 'completion_probabilities', 'is missing (was n_probs sent, and stream false?)');
  if (probs.length !== tokens.length) fail('', 'completion_probabilities', `has ${probs.length} entries for ${tokens.length} tokens`);
  const stopType = body.stop_type;
  if (tokens.length !== opts.nPredict && !(stopType === 'eos' && !opts.ignoreEos)) {
    fail('', 'tokens', `has ${tokens.length} tokens, n_predict was ${opts.nPredict} (stop_type ${JSON.stringify(stopType)})`);
  }
  const greedy: number[] = [];
  const tops: PeerTopEntry[][] = [];
  for (const [i, e] of probs.entries()) {
    const where = `completion_probabilities[${i}]`;
    if (!isObject(e)) fail(where, 'entry', 'is not an object');
    const id = tokenId(e.id, where, 'id');
    if (tokenId(tokens[i], '', `tokens[${i}]`) !== id) fail(where, 'id', `is ${id} but tokens[${i}] is ${String(tokens[i])}`);
    greedy.push(id);
    tops.push(parseTop(e, where, opts.nProbs));
  }
  return { greedy, tops };
}

async function postJson(url: string, body: unknown, timeoutMs: number): Promise<unknown> {
  let res: Response;
  let text: string;
  try {
    res = await fetch(url, {
      method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body), signal: AbortSignal.timeout(timeoutMs),
    });
    text = await res.text();
  } catch (err) {
    // fetch's TypeError ("fetch failed") hides the reason in its cause: a refused connection is the user's to fix
    const cause = (err as Error & { cause?: unknown }).cause;
    throw new Error(`cannot reach llama-server at ${url}: ${cause instanceof Error ? cause.message : (err as Error).message}`, { cause: err });
  }
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    throw new Error(`${url}: HTTP ${res.status}, not JSON: ${text.slice(0, 200)}`);
  }
  if (!res.ok) {
    const msg = isObject(json) && isObject(json.error) ? String(json.error.message) : text.slice(0, 200);
    throw new Error(`${url}: HTTP ${res.status}: ${msg}`);
  }
  return json;
}

/** llama-server's GET /props (build and model path), for the dump's provenance; absent when the server has none. */
async function peerProps(url: string, timeoutMs: number): Promise<Record<string, unknown> | undefined> {
  const base = completionUrl(url).replace(/\/completion$/, '');
  try {
    const res = await fetch(`${base}/props`, { signal: AbortSignal.timeout(timeoutMs) });
    if (!res.ok) return undefined;
    const p = (await res.json()) as unknown;
    if (!isObject(p)) return undefined;
    const keep: Record<string, unknown> = {};
    for (const k of ['build_info', 'model_path', 'n_ctx', 'total_slots']) if (k in p) keep[k] = p[k];
    return keep;
  } catch {
    return undefined;
  }
}

/** Asks the peer for each gate prompt's greedy continuation with its top-k logprobs, one request a prompt. */
export async function dumpPeerReference(o: PeerDumpOptions): Promise<PeerDump> {
  const nProbs = o.nProbs ?? 20;
  const ignoreEos = o.ignoreEos ?? true;
  const timeoutMs = o.timeoutMs ?? 600_000;
  const url = completionUrl(o.url);
  const nPredict = o.prompts.maxTokens;
  const props = await peerProps(o.url, Math.min(timeoutMs, 10_000));
  const dump: PeerDump = { peer: { kind: 'llama.cpp', url: o.url, nProbs, ignoreEos, ...(props ? { props } : {}) }, prompts: [] };
  for (const p of o.prompts.prompts) {
    const prompt = typeof p.prompt === 'string' ? o.encode(p.prompt) : [...p.prompt];
    if (prompt.length === 0) throw new Error(`prompt ${p.id}: no tokens`);
    const body = await postJson(url, llamaCppCompletionBody(prompt, nPredict, nProbs, ignoreEos), timeoutMs);
    let parsed: ReturnType<typeof parseLlamaCppCompletion>;
    try {
      parsed = parseLlamaCppCompletion(body, { nPredict, nProbs, ignoreEos });
    } catch (err) {
      throw new Error(`prompt ${p.id}: ${(err as Error).message}`, { cause: err });
    }
    dump.prompts.push({
      id: p.id, prompt, greedy: parsed.greedy, steps: parsed.tops.map((top, k) => ({ position: prompt.length + k, top })),
    });
    o.log?.(`  ${p.id}: ${prompt.length} prompt tokens, ${parsed.greedy.length} greedy tokens`);
  }
  return dump;
}
