// One generation request from HTTP to engine and back: runs its choices
// concurrently, streams them as SSE or answers once, and aborts the engine
// requests as soon as the client goes away or the server drains.

import { setMaxListeners } from 'node:events';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { EngineRequest } from '../engine/types.js';
import { toApiError } from './errors.js';
import { runChoice, type ChoiceDelta, type ChoiceOutcome, type ServeContext } from './generation.js';
import { SseWriter } from './sse.js';

export interface Usage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
  prompt_tokens_details: { cached_tokens: number };
}

/** Response shapes of one endpoint (completions or chat). */
export interface ChoiceFormatter {
  /** Chunks sent right after the stream opens (chat role deltas, echoed prompts). */
  openingChunks(): unknown[];
  /** A chunk for one delta (an array: several), or null to send nothing. */
  deltaChunk(d: ChoiceDelta): unknown | null;
  /** The chunks that end one choice (the last one carries its finish_reason). */
  finishChunks(o: ChoiceOutcome): unknown[];
  usageChunk(usage: Usage): unknown;
  response(outcomes: ChoiceOutcome[], usage: Usage): unknown;
}

/** The abort handles of every generation request in flight. */
export class InflightRequests {
  private readonly active = new Set<AbortController>();
  private idleWaiters: (() => void)[] = [];

  add(c: AbortController): void {
    this.active.add(c);
  }

  delete(c: AbortController): void {
    this.active.delete(c);
    if (this.active.size === 0) {
      const waiters = this.idleWaiters;
      this.idleWaiters = [];
      for (const w of waiters) w();
    }
  }

  get size(): number {
    return this.active.size;
  }

  abortAll(): void {
    for (const c of this.active) c.abort();
  }

  /** Resolves true once nothing is in flight, false after timeoutMs. */
  waitIdle(timeoutMs: number): Promise<boolean> {
    if (this.active.size === 0) return Promise.resolve(true);
    return new Promise((resolve) => {
      const timer = setTimeout(() => resolve(false), timeoutMs);
      this.idleWaiters.push(() => {
        clearTimeout(timer);
        resolve(true);
      });
    });
  }
}

export function usageOf(promptLengths: number[], outcomes: ChoiceOutcome[], n: number): Usage {
  const numPromptTokens = promptLengths.reduce((a, b) => a + b, 0);
  const numCompletionTokens = outcomes.reduce((a, o) => a + o.tokenIds.length, 0);
  let numCachedTokens = 0;
  for (let p = 0; p < promptLengths.length; p++) {
    numCachedTokens += Math.max(0, ...outcomes.slice(p * n, (p + 1) * n).map((o) => o.numCachedTokens));
  }
  return {
    prompt_tokens: numPromptTokens,
    completion_tokens: numCompletionTokens,
    total_tokens: numPromptTokens + numCompletionTokens,
    prompt_tokens_details: { cached_tokens: numCachedTokens },
  };
}

async function runAll(
  ctx: ServeContext,
  reqs: EngineRequest[],
  signal: AbortSignal,
  dropGenerated: boolean,
  onDelta?: (d: ChoiceDelta) => void,
  onFinish?: (o: ChoiceOutcome) => void,
): Promise<ChoiceOutcome[]> {
  const local = new AbortController();
  // each of the n choices listens on it: many listeners, not a leak
  setMaxListeners(0, local.signal);
  const forward = () => local.abort();
  signal.addEventListener('abort', forward, { once: true });
  if (signal.aborted) local.abort();
  try {
    return await Promise.all(reqs.map(async (r, i) => {
      try {
        const deltas = dropGenerated && onDelta ? (d: ChoiceDelta) => {
          if (d.promptLogprobs !== undefined) onDelta({ ...d, text: '', tokenIds: [], logprobs: [] });
        } : onDelta;
        const run = await runChoice(ctx, r, i, local.signal, deltas);
        const o = dropGenerated ? { ...run, text: '', tokenIds: [], logprobs: [] } : run;
        onFinish?.(o);
        return o;
      } catch (e) {
        local.abort();
        throw e;
      }
    }));
  } finally {
    signal.removeEventListener('abort', forward);
  }
}

export interface ServeArgs {
  ctx: ServeContext;
  inflight: InflightRequests;
  reqs: EngineRequest[];
  promptLengths: number[];
  n: number;
  stream: boolean;
  includeUsage: boolean;
  /** Usage in every chunk too: the choice's prompt and its tokens so far (vLLM's continuous_usage_stats). */
  continuousUsage: boolean;
  fmt: ChoiceFormatter;
  /** Chunks are typed events (`event: <type>` lines, no [DONE]): the Responses API. */
  events?: boolean;
  /** What the engine generates is not the answer's (echo with max_tokens 0): deltas and outcomes go without it. */
  dropGenerated?: boolean;
}

/** A chunk of one choice with that choice's usage so far. */
function withChoiceUsage(chunk: unknown, a: ServeArgs, generated: Map<number, number>): unknown {
  const c = chunk as { choices?: { index: number }[] };
  const index = c.choices?.[0]?.index ?? 0;
  const prompt = a.promptLengths[Math.floor(index / a.n)] ?? 0;
  const completion = generated.get(index) ?? 0;
  return { ...c, usage: { prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion } };
}

export async function serveChoices(request: FastifyRequest, reply: FastifyReply, a: ServeArgs): Promise<unknown> {
  const controller = new AbortController();
  a.inflight.add(controller);
  const res = reply.raw;
  const onClose = () => {
    if (!res.writableFinished) controller.abort();
  };
  res.on('close', onClose);
  try {
    if (!a.stream) {
      const outcomes = await runAll(a.ctx, a.reqs, controller.signal, a.dropGenerated ?? false);
      return a.fmt.response(outcomes, usageOf(a.promptLengths, outcomes, a.n));
    }
    reply.hijack();
    const sse = new SseWriter(res);
    sse.start();
    const generated = new Map<number, number>();
    const send = (c: unknown) => {
      if (a.events) sse.sendEvent((c as { type: string }).type, c);
      else sse.send(a.continuousUsage ? withChoiceUsage(c, a, generated) : c);
    };
    for (const c of a.fmt.openingChunks()) send(c);
    try {
      const outcomes = await runAll(
        a.ctx, a.reqs, controller.signal, a.dropGenerated ?? false,
        (d) => {
          generated.set(d.index, (generated.get(d.index) ?? 0) + d.tokenIds.length);
          const c = a.fmt.deltaChunk(d);
          if (Array.isArray(c)) c.forEach(send);
          else if (c !== null) send(c);
        },
        (o) => {
          for (const c of a.fmt.finishChunks(o)) send(c);
        },
      );
      if (a.includeUsage) {
        const u = a.fmt.usageChunk(usageOf(a.promptLengths, outcomes, a.n));
        if (a.events) sse.sendEvent((u as { type: string }).type, u);
        else sse.send(u);
      }
    } catch (e) {
      const err = toApiError(e);
      request.log.warn({ err: e }, 'stream ended with an error');
      const { message, param, code } = err.toBody().error;
      if (a.events) sse.sendEvent('error', { type: 'error', code, message, param });
      else sse.error(err.toBody());
    }
    sse.done(!a.events);
    return reply;
  } finally {
    a.inflight.delete(controller);
    if (a.stream) res.off('close', onClose);
  }
}
