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
  /** Each listed step's distribution at `position`, i.e. after the prompt and greedy[0 .. position - prompt.length). */
  steps: { position: number; top: PeerTopEntry[] }[];
  /** Greedy indices llama-server gave no distribution for (their token ends inside a UTF-8 character). */
  unlisted: number[];
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
  /** A token's bytes as llama-server renders it (control tokens empty): places the steps it lists (llamaCppListedSteps). */
  piece?: (id: number) => Uint8Array;
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

/** llama.cpp's validate_utf8 (server-common.cpp): the length of `text` without a multi-byte character cut off at its end. */
export function utf8CompleteLength(text: Uint8Array): number {
  const len = text.length;
  for (let i = 1; i <= 4 && i <= len; i++) {
    const c = text[len - i]!;
    if ((c & 0xe0) === 0xc0 && i < 2) return len - i;
    if ((c & 0xf0) === 0xe0 && i < 3) return len - i;
    if ((c & 0xf8) === 0xf0 && i < 4) return len - i;
  }
  return len;
}

/**
 * The greedy indices llama-server v0.5.0 lists in completion_probabilities, with the bytes of each entry's `bytes`
 * (its text_to_send): process_token (server-context.cpp) adds a token's entry only when the text generated so far
 * does not end inside a UTF-8 character, so a token that starts or continues a character split over several tokens
 * has none, and the one completing it carries the whole character.
 */
export function llamaCppListedSteps(tokens: readonly number[], piece: (id: number) => Uint8Array): { index: number; bytes: Uint8Array }[] {
  const listed: { index: number; bytes: Uint8Array }[] = [];
  let pending: number[] = [];
  let tail: number[] = [];  // the last bytes of the text generated so far, all validate_utf8 looks at
  for (const [i, id] of tokens.entries()) {
    const b = piece(id);
    pending.push(...b);
    tail = [...tail, ...b].slice(-4);
    const t = Uint8Array.from(tail);
    if (utf8CompleteLength(t) === t.length) {
      listed.push({ index: i, bytes: Uint8Array.from(pending) });
      pending = [];
    }
  }
  return listed;
}

const sameBytes = (a: readonly number[], b: Uint8Array): boolean => a.length === b.length && a.every((x, i) => x === b[i]);

/** The greedy tokens and per-step top lists of one /completion response, checked field by field. */
export function parseLlamaCppCompletion(body: unknown, opts: { nPredict: number; nProbs: number; ignoreEos: boolean;
  piece?: (id: number) => Uint8Array }): { greedy: number[]; steps: { index: number; top: PeerTopEntry[] }[]; unlisted: number[] } {
  if (!isObject(body)) fail('', 'body', 'is not a JSON object');
  if (isObject(body.error)) fail('', 'error', String(body.error.message ?? JSON.stringify(body.error)));
  const tokens = body.tokens;
  if (!Array.isArray(tokens)) fail('', 'tokens', 'is missing (was return_tokens sent? llama-server older than v0.5.0?)');
  const probs = body.completion_probabilities;
  if (!Array.isArray(probs)) fail('', 'completion_probabilities', 'is missing (was n_probs sent, and stream false?)');
  const stopType = body.stop_type;
  if (tokens.length !== opts.nPredict && !(stopType === 'eos' && !opts.ignoreEos)) {
    fail('', 'tokens', `has ${tokens.length} tokens, n_predict was ${opts.nPredict} (stop_type ${JSON.stringify(stopType)})`);
  }
  const greedy = tokens.map((t, i) => tokenId(t, '', `tokens[${i}]`));
  // which token each entry belongs to: all of them, or (some tokens ending inside a character) the listed ones
  let listed: { index: number; bytes?: Uint8Array }[] = greedy.map((_, index) => ({ index }));
  if (probs.length !== tokens.length) {
    if (!opts.piece) {
      fail('', 'completion_probabilities', `has ${probs.length} entries for ${tokens.length} tokens (llama-server lists no token `
        + 'that ends inside a UTF-8 character; placing the others needs the tokenizer\'s pieces)');
    }
    listed = llamaCppListedSteps(greedy, opts.piece);
    if (listed.length !== probs.length) {
      fail('', 'completion_probabilities', `has ${probs.length} entries for ${tokens.length} tokens, of which ${listed.length} end on a whole UTF-8 character`);
    }
  }
  const steps: { index: number; top: PeerTopEntry[] }[] = [];
  for (const [j, e] of probs.entries()) {
    const where = `completion_probabilities[${j}]`;
    if (!isObject(e)) fail(where, 'entry', 'is not an object');
    const id = tokenId(e.id, where, 'id');
    const { index, bytes } = listed[j]!;
    if (greedy[index] !== id) fail(where, 'id', `is ${id} but tokens[${index}] is ${greedy[index]}`);
    if (bytes && Array.isArray(e.bytes) && !sameBytes(e.bytes as number[], bytes)) {
      fail(where, 'bytes', `are ${JSON.stringify(e.bytes)}, the tokenizer's pieces since the last entry give ${JSON.stringify([...bytes])}`);
    }
    steps.push({ index, top: parseTop(e, where, opts.nProbs) });
  }
  const seen = new Set(steps.map((s) => s.index));
  return { greedy, steps, unlisted: greedy.flatMap((_, i) => (seen.has(i) ? [] : [i])) };
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
      parsed = parseLlamaCppCompletion(body, { nPredict, nProbs, ignoreEos, ...(o.piece ? { piece: o.piece } : {}) });
    } catch (err) {
      throw new Error(`prompt ${p.id}: ${(err as Error).message}`, { cause: err });
    }
    dump.prompts.push({
      id: p.id, prompt, greedy: parsed.greedy, steps: parsed.steps.map((s) => ({ position: prompt.length + s.index, top: s.top })),
      unlisted: parsed.unlisted,
    });
    const unlisted = parsed.unlisted.length ? ` (${parsed.unlisted.length} ending inside a UTF-8 character, which llama-server lists no distribution for)` : '';
    o.log?.(`  ${p.id}: ${prompt.length} prompt tokens, ${parsed.greedy.length} greedy tokens${unlisted}`);
  }
  return dump;
}
