// One streaming /v1/completions request against any OpenAI-compatible server,
// timed from the SSE stream with performance.now().

import { performance } from 'node:perf_hooks';
import { SseParser } from './sse.js';

export interface CompletionRequest {
  /** Server base URL (`http://host:port` or `.../v1`); a URL ending in `/completions` is used as is. */
  url: string;
  model: string;
  prompt: string | number[];
  maxTokens: number;
  ignoreEos?: boolean;
  temperature?: number;
  /** Ask for per-delta token ids (vLLM `return_token_ids`). */
  returnTokenIds?: boolean;
  extraBody?: Record<string, unknown>;
  headers?: Record<string, string>;
  timeoutMs?: number;
  signal?: AbortSignal;
}

export interface RequestResult {
  ok: boolean;
  /** performance.now() when the request was sent. */
  sentAtMs: number;
  /** NaN when no token arrived. */
  ttftMs: number;
  /** One gap per token-bearing delta after the first. */
  itlMs: number[];
  e2eMs: number;
  outputTokens: number;
  /** Server-reported prompt tokens (usage); null when the server did not say. */
  promptTokens: number | null;
  /** Prompt tokens served from the server's prefix cache (usage.prompt_tokens_details.cached_tokens), when reported. */
  cachedPromptTokens: number | null;
  /** Token ids when the server returned them for every delta, else null. */
  tokenIds: number[] | null;
  text: string;
  finishReason: string | null;
  error?: string;
}

export interface CompletionDelta {
  text: string;
  /** A choice's delta that is not its finish chunk: a token arrived, even if its text is held back (empty). */
  isTokenDelta: boolean;
  tokenIds: number[] | null;
  finishReason: string | null;
  usage: { promptTokens: number | null; completionTokens: number | null; cachedPromptTokens: number | null } | null;
  error: string | null;
}

export function completionsUrl(url: string): string {
  const base = url.replace(/\/+$/, '');
  if (base.endsWith('/completions')) return base;
  return base.endsWith('/v1') ? `${base}/completions` : `${base}/v1/completions`;
}

function tokenIdsFromLogprobs(logprobs: unknown): number[] | null {
  const tokens = (logprobs as { tokens?: unknown } | null)?.tokens;
  if (!Array.isArray(tokens) || tokens.length === 0) return null;
  const ids: number[] = [];
  for (const t of tokens) {
    const m = typeof t === 'string' ? /^token_id:(\d+)$/.exec(t) : null;
    if (!m) return null;
    ids.push(Number(m[1]));
  }
  return ids;
}

/** Parses one `data:` payload of a completions stream (not `[DONE]`). */
export function parseCompletionChunk(data: string): CompletionDelta {
  let obj: Record<string, unknown>;
  try {
    obj = JSON.parse(data) as Record<string, unknown>;
  } catch {
    return { text: '', isTokenDelta: false, tokenIds: null, finishReason: null, usage: null, error: `unparsable frame: ${data.slice(0, 200)}` };
  }
  const err = obj['error'] ?? (obj['object'] === 'error' ? obj : undefined);
  if (err !== undefined) {
    const message = typeof err === 'string' ? err : String((err as { message?: unknown }).message ?? JSON.stringify(err));
    return { text: '', isTokenDelta: false, tokenIds: null, finishReason: null, usage: null, error: message };
  }
  const choice = (Array.isArray(obj['choices']) ? obj['choices'][0] : undefined) as Record<string, unknown> | undefined;
  const rawIds = choice?.['token_ids'];
  const tokenIds = Array.isArray(rawIds) ? (rawIds as number[]) : tokenIdsFromLogprobs(choice?.['logprobs']);
  const u = obj['usage'] as
    | { prompt_tokens?: number; completion_tokens?: number; prompt_tokens_details?: { cached_tokens?: number } | null }
    | null
    | undefined;
  const finishReason = typeof choice?.['finish_reason'] === 'string' ? (choice['finish_reason'] as string) : null;
  return {
    text: typeof choice?.['text'] === 'string' ? (choice['text'] as string) : '',
    isTokenDelta: choice !== undefined && finishReason === null,
    tokenIds,
    finishReason,
    usage: u
      ? { promptTokens: u.prompt_tokens ?? null, completionTokens: u.completion_tokens ?? null, cachedPromptTokens: u.prompt_tokens_details?.cached_tokens ?? null }
      : null,
    error: null,
  };
}

/** Folds a stream's deltas and their arrival times into a RequestResult. */
export class StreamTimer {
  private readonly arrivalsMs: number[] = [];
  private numCountedTokens = 0;
  private idsComplete = true;
  private readonly ids: number[] = [];
  private text = '';
  private finishReason: string | null = null;
  private promptTokens: number | null = null;
  private completionTokens: number | null = null;
  private cachedPromptTokens: number | null = null;
  private error: string | undefined;
  done = false;

  get sawFinish(): boolean {
    return this.finishReason !== null;
  }

  constructor(readonly sentAtMs: number) {}

  /** Feeds one SSE data payload received at `nowMs`. */
  onData(data: string, nowMs: number): void {
    if (data.trim() === '[DONE]') {
      this.done = true;
      return;
    }
    const d = parseCompletionChunk(data);
    if (d.error !== null) {
      this.error ??= d.error;
      return;
    }
    if (d.usage) {
      this.promptTokens = d.usage.promptTokens ?? this.promptTokens;
      this.completionTokens = d.usage.completionTokens ?? this.completionTokens;
      this.cachedPromptTokens = d.usage.cachedPromptTokens ?? this.cachedPromptTokens;
    }
    if (d.finishReason) this.finishReason = d.finishReason;
    // a chunk counts as one token's arrival (as vLLM's benchmark client), even with its text held back
    const numTokens = d.tokenIds ? d.tokenIds.length : d.text.length > 0 || d.isTokenDelta ? 1 : 0;
    if (numTokens === 0) return;
    if (d.tokenIds) this.ids.push(...d.tokenIds);
    else this.idsComplete = false;
    this.text += d.text;
    this.numCountedTokens += numTokens;
    this.arrivalsMs.push(nowMs);
  }

  fail(message: string): void {
    this.error ??= message;
  }

  finish(endMs: number): RequestResult {
    const first = this.arrivalsMs[0];
    const itlMs: number[] = [];
    for (let i = 1; i < this.arrivalsMs.length; i++) itlMs.push(this.arrivalsMs[i]! - this.arrivalsMs[i - 1]!);
    const error = this.error ?? (this.arrivalsMs.length === 0 ? 'no tokens received' : undefined);
    return {
      ok: error === undefined,
      sentAtMs: this.sentAtMs,
      ttftMs: first === undefined ? NaN : first - this.sentAtMs,
      itlMs,
      e2eMs: endMs - this.sentAtMs,
      outputTokens: this.completionTokens ?? this.numCountedTokens,
      promptTokens: this.promptTokens,
      cachedPromptTokens: this.cachedPromptTokens,
      tokenIds: this.idsComplete && this.ids.length > 0 ? this.ids : null,
      text: this.text,
      finishReason: this.finishReason,
      ...(error === undefined ? {} : { error }),
    };
  }
}

export function completionBody(req: CompletionRequest): Record<string, unknown> {
  return {
    model: req.model,
    prompt: req.prompt,
    max_tokens: req.maxTokens,
    temperature: req.temperature ?? 0,
    stream: true,
    stream_options: { include_usage: true },
    ...(req.ignoreEos ? { ignore_eos: true } : {}),
    ...(req.returnTokenIds ? { return_token_ids: true } : {}),
    ...req.extraBody,
  };
}

/** Sends one streaming completion; never throws: failures come back as `error`. */
export async function streamCompletion(req: CompletionRequest): Promise<RequestResult> {
  const signals = [req.signal, req.timeoutMs ? AbortSignal.timeout(req.timeoutMs) : undefined].filter(
    (s): s is AbortSignal => s !== undefined,
  );
  const sentAtMs = performance.now();
  const timer = new StreamTimer(sentAtMs);
  try {
    const res = await fetch(completionsUrl(req.url), {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'text/event-stream', ...req.headers },
      body: JSON.stringify(completionBody(req)),
      ...(signals.length ? { signal: signals.length === 1 ? signals[0] : AbortSignal.any(signals) } : {}),
    });
    if (!res.ok || !res.body) {
      const body = await res.text().catch(() => '');
      timer.fail(`HTTP ${res.status}: ${body.slice(0, 500)}`);
      return timer.finish(performance.now());
    }
    const parser = new SseParser();
    for await (const chunk of res.body as AsyncIterable<Uint8Array>) {
      const nowMs = performance.now();
      for (const ev of parser.push(chunk)) {
        if (ev.event === 'error') timer.fail(ev.data);
        else timer.onData(ev.data, nowMs);
      }
    }
    const endMs = performance.now();
    for (const ev of parser.end()) timer.onData(ev.data, endMs);
    if (!timer.done && !timer.sawFinish) timer.fail('stream ended without [DONE] or a finish reason');
    return timer.finish(endMs);
  } catch (e) {
    timer.fail(e instanceof Error ? `${e.name}: ${e.message}` : String(e));
    return timer.finish(performance.now());
  }
}
