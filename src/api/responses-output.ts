// The Responses API's output items over one choice: a reasoning item (with --reasoning-parser), a message item of
// one output_text part, and a function_call item per tool call, in the order the model wrote them. The text is read
// by the chat route's parsers (chat-output.ts), or, under a forced tool_choice, as the call(s) the grammar made.
// Streamed, items open as their text starts; a parsed call goes out whole, a forced one's arguments as they are
// written; an answer with no item at all still gets an (empty) message.

import { randomBytes, randomUUID } from 'node:crypto';
import { ChatOutputStream, parseChatOutput, type ChatOutput, type ChatOutputOptions } from './chat-output.js';
import type { ChoiceDelta, ChoiceOutcome } from './generation.js';
import { requiredCalls } from './routes/chat-forced.js';
import type { Body } from './schemas.js';
import type { ChoiceFormatter, Usage } from './serve.js';
import { RequiredCallsStream } from './required-calls-stream.js';
import type { ParsedToolCall } from './tool-parser.js';
import type { ToolMode } from './tools.js';
import type { TokenLogprob } from '../engine/types.js';

/** The response object's fields that echo the request. */
export interface ResponseHead {
  id: string;
  model: string;
  createdAt: number;
  echo: Body;
}

export interface ResponsesOutputOptions {
  parse: ChatOutputOptions;
  /** With include ["message.output_text.logprobs"]: the output_text logprobs entries of some tokens; else null. */
  logprobs: ((lps: readonly TokenLogprob[]) => unknown[]) | null;
  /** A forced tool_choice: the output is the named function's arguments, or a list of calls. */
  forced: (ToolMode & { kind: 'named' | 'required' }) | null;
}

export const newId = (prefix: string) => `${prefix}_${randomUUID().replaceAll('-', '')}`;
const part = (text: string, logprobs?: unknown[]) => ({ type: 'output_text', text, annotations: [], ...(logprobs ? { logprobs } : {}) });
const messageItem = (id: string, status: string, content: unknown[]) => ({ type: 'message', id, status, role: 'assistant', content });
const reasoningItem = (id: string, status: string, text: string) =>
  ({ type: 'reasoning', id, summary: [], content: [{ type: 'reasoning_text', text }], status });
const newCallId = () => `call_${randomBytes(12).toString('hex')}`;
const callItem = (id: string, callId: string, c: ParsedToolCall, status: string) =>
  ({ type: 'function_call', id, call_id: callId, name: c.name, arguments: c.arguments, status });
const statusOf = (o: ChoiceOutcome | null) => (o?.finishReason === 'length' ? 'incomplete' : 'completed');

/** A whole output read as the request's options say. */
function outputOf(text: string, o: ResponsesOutputOptions): ChatOutput {
  if (o.forced === null) return parseChatOutput(text, o.parse);
  const calls = o.forced.kind === 'named' ? [{ name: o.forced.name, arguments: text }] : requiredCalls(text);
  return calls === null ? { reasoning: null, content: text, calls: [] } : { reasoning: null, content: null, calls };
}

/** The output items of a whole answer; `logprobs` (every token's, as vLLM gives them) go with the message text. */
function itemsOf(out: ChatOutput, status: string, logprobs?: unknown[]): unknown[] {
  const items: unknown[] = [];
  if (out.reasoning !== null && out.reasoning !== '') items.push(reasoningItem(newId('rs'), status, out.reasoning));
  if ((out.content !== null && out.content !== '') || out.calls.length === 0) {
    items.push(messageItem(newId('msg'), status, [part(out.content ?? '', logprobs)]));
  }
  for (const c of out.calls) items.push(callItem(newId('fc'), newCallId(), c, 'completed'));
  return items;
}

export function responsesFormatter(h: ResponseHead, opts: ResponsesOutputOptions): ChoiceFormatter {
  let seq = 0;
  let outcome: ChoiceOutcome | null = null;
  const items: unknown[] = [];
  /** The item being streamed: text items until the next kind starts, a call until the next item or the end. */
  let open: { kind: 'reasoning' | 'message' | 'call'; id: string; index: number; text: string; name: string; callId: string;
    logprobs: unknown[] } | null = null;
  /** The logprobs entries of the delta being turned into events (they go with its message text, if it has any). */
  let deltaLogprobs: unknown[] = [];
  const stream = opts.forced === null ? new ChatOutputStream(opts.parse) : null;
  const required = opts.forced?.kind === 'required' ? new RequiredCallsStream() : null;
  const named = opts.forced?.kind === 'named' ? opts.forced.name : '';
  let forcedText = '';
  const event = (type: string, fields: Body) => ({ type, sequence_number: seq++, ...fields });
  const response = (status: string, output: unknown[], usage: Usage | null) => ({
    id: h.id, object: 'response', created_at: h.createdAt, status, model: h.model, output,
    usage: usage && {
      input_tokens: usage.prompt_tokens, input_tokens_details: { cached_tokens: usage.prompt_tokens_details.cached_tokens },
      output_tokens: usage.completion_tokens, output_tokens_details: { reasoning_tokens: 0 }, total_tokens: usage.total_tokens,
    },
    incomplete_details: outcome?.finishReason === 'length' ? { reason: 'max_output_tokens' } : null,
    error: null, previous_response_id: null, ...h.echo,
  });

  const close = (status: string): unknown[] => {
    if (open === null) return [];
    const o = open;
    open = null;
    const at = { item_id: o.id, output_index: o.index, content_index: 0 };
    if (o.kind === 'call') {
      const item = callItem(o.id, o.callId, { name: o.name, arguments: o.text }, 'completed');
      items.push(item);
      return [event('response.function_call_arguments.done', { item_id: o.id, output_index: o.index, name: o.name, arguments: o.text }),
        event('response.output_item.done', { output_index: o.index, item })];
    }
    if (o.kind === 'reasoning') {
      const item = reasoningItem(o.id, status, o.text);
      items.push(item);
      return [event('response.reasoning_text.done', { ...at, text: o.text }),
        event('response.output_item.done', { output_index: o.index, item })];
    }
    const lps = opts.logprobs ? o.logprobs : undefined;
    const item = messageItem(o.id, status, [part(o.text, lps)]);
    items.push(item);
    return [event('response.output_text.done', { ...at, text: o.text, logprobs: o.logprobs }),
      event('response.content_part.done', { ...at, part: part(o.text, lps) }),
      event('response.output_item.done', { output_index: o.index, item })];
  };
  /** Opens an item of `kind` (closing the one before) and returns its opening events. */
  const begin = (kind: 'reasoning' | 'message' | 'call', name = ''): unknown[] => {
    const events = close('completed');
    const o = open = { kind, id: newId(kind === 'reasoning' ? 'rs' : kind === 'message' ? 'msg' : 'fc'), index: items.length, text: '', name,
      callId: newCallId(), logprobs: [] as unknown[] };
    const item = kind === 'reasoning' ? reasoningItem(o.id, 'in_progress', '') : kind === 'message' ? messageItem(o.id, 'in_progress', [])
      : callItem(o.id, o.callId, { name, arguments: '' }, 'in_progress');
    events.push(event('response.output_item.added', { output_index: o.index, item }));
    if (kind === 'message') {
      events.push(event('response.content_part.added', { item_id: o.id, output_index: o.index, content_index: 0,
        part: part('', opts.logprobs ? [] : undefined) }));
    }
    return events;
  };
  const text = (kind: 'reasoning' | 'message' | 'call', delta: string): unknown[] => {
    if (delta === '') return [];
    const events = open?.kind === kind ? [] : begin(kind);
    const o = open!;
    o.text += delta;
    const at = { item_id: o.id, output_index: o.index, content_index: 0 };
    const lps = kind === 'message' ? deltaLogprobs : [];
    if (kind === 'message') {
      o.logprobs.push(...lps);
      deltaLogprobs = [];
    }
    events.push(kind === 'reasoning' ? event('response.reasoning_text.delta', { ...at, delta })
      : kind === 'message' ? event('response.output_text.delta', { ...at, delta, logprobs: lps })
        : event('response.function_call_arguments.delta', { item_id: o.id, output_index: o.index, delta }));
    return events;
  };
  const calls = (cs: ParsedToolCall[]): unknown[] => cs.flatMap((c) => [...begin('call', c.name), ...text('call', c.arguments)]);
  const deltaOf = (d: { reasoning: string; content: string; calls: ParsedToolCall[] }) =>
    [...text('reasoning', d.reasoning), ...text('message', d.content), ...calls(d.calls)];
  /** A forced choice's delta: the named call's arguments, or the calls of a "required" list as they come. */
  const forcedDelta = (delta: string): unknown[] => {
    forcedText += delta;
    if (required === null) return [...(open === null && delta !== '' ? begin('call', named) : []), ...text('call', delta)];
    return required.push(delta).flatMap((e) => e.kind === 'start' ? begin('call', e.name) : text('call', e.delta));
  };

  return {
    openingChunks() {
      return [event('response.created', { response: response('in_progress', [], null) }),
        event('response.in_progress', { response: response('in_progress', [], null) })];
    },
    deltaChunk(dl: ChoiceDelta) {
      deltaLogprobs = opts.logprobs ? opts.logprobs(dl.logprobs) : [];
      const events = stream === null ? forcedDelta(dl.text) : deltaOf(stream.push(dl.text));
      return events.length === 0 ? null : events;
    },
    finishChunks(o: ChoiceOutcome) {
      outcome = o;
      deltaLogprobs = [];
      const events = stream !== null ? deltaOf(stream.finish()) : [];
      // a "required" list cut before any call's name: the text, as the whole-output parse answers it
      if (required !== null && required.callCount === 0) events.push(...text('message', forcedText));
      if (items.length === 0 && open === null) events.push(...begin('message'));
      return [...events, ...close(statusOf(o))];
    },
    usageChunk(usage: Usage) {
      const status = statusOf(outcome);
      return event(status === 'incomplete' ? 'response.incomplete' : 'response.completed', { response: response(status, items, usage) });
    },
    response(outcomes: ChoiceOutcome[], usage: Usage) {
      outcome = outcomes[0]!;
      const lps = opts.logprobs ? opts.logprobs(outcome.logprobs) : undefined;
      return response(statusOf(outcome), itemsOf(outputOf(outcome.text, opts), statusOf(outcome), lps), usage);
    },
  };
}
