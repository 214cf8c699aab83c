// Chat answers under a forced tool choice (vLLM's named function calling and tool_choice "required"): the
// grammar made the output the named function's arguments, or a JSON list of {"name", "parameters"} calls; they
// come back as tool_calls. Streamed, a named call's arguments go out as they are generated, and each call of a
// "required" list once its name is whole, then its arguments as they come (required-calls-stream.ts).

import type { ChoiceDelta, ChoiceOutcome } from '../generation.js';
import type { ChatRequest } from '../schemas.js';
import type { ChoiceFormatter, Usage } from '../serve.js';
import { RequiredCallsStream } from '../required-calls-stream.js';
import type { ParsedToolCall } from '../tool-parser.js';
import { toolCallJson, type ToolMode } from '../tools.js';
import { chatResponse, chunkHeadOf, openingChunks, usageChunk, type Header } from './chat-shapes.js';

/** A "required" output: its calls, or null when it is not a whole list (cut by max_tokens). */
export function requiredCalls(text: string): ParsedToolCall[] | null {
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch {
    return null;
  }
  if (!Array.isArray(v)) return null;
  const calls: ParsedToolCall[] = [];
  for (const c of v as { name?: unknown; parameters?: unknown }[]) {
    if (typeof c?.name !== 'string') return null;
    calls.push({ name: c.name, arguments: JSON.stringify(c.parameters ?? {}) });
  }
  return calls;
}

export function forcedToolFormatter(r: ChatRequest, promptIds: number[], h: Header, mode: ToolMode & { kind: 'named' | 'required' },
  logprobsOf: (o: { logprobs: ChoiceDelta['logprobs'] }) => unknown): ChoiceFormatter {
  const chunkHead = chunkHeadOf(h);
  const started = new Set<number>();
  const texts = new Map<number, string>();
  const lists = new Map<number, RequiredCallsStream>();
  const listOf = (index: number) => {
    let l = lists.get(index);
    if (l === undefined) lists.set(index, (l = new RequiredCallsStream()));
    return l;
  };
  const chunk = (index: number, delta: Record<string, unknown>, extra: Record<string, unknown> = {}) =>
    ({ ...chunkHead, choices: [{ index, delta, logprobs: null, finish_reason: null, ...extra }] });
  return {
    openingChunks: () => openingChunks(r, promptIds, h),
    deltaChunk(d: ChoiceDelta) {
      const extra = { logprobs: logprobsOf(d), ...(r.returnTokenIds ? { token_ids: d.tokenIds } : {}) };
      if (mode.kind === 'required') {
        texts.set(d.index, (texts.get(d.index) ?? '') + d.text);
        const calls = listOf(d.index).push(d.text).map((e) => e.kind === 'start'
          ? toolCallJson({ name: e.name, arguments: '' }, e.index) : { index: e.index, function: { arguments: e.delta } });
        if (calls.length === 0 && r.logprobs === null && !r.returnTokenIds) return null;
        return chunk(d.index, calls.length > 0 ? { tool_calls: calls } : {}, extra);
      }
      if (d.text === '' && r.logprobs === null && !r.returnTokenIds) return null;
      if (started.has(d.index)) return chunk(d.index, { tool_calls: [{ index: 0, function: { arguments: d.text } }] }, extra);
      started.add(d.index);
      return chunk(d.index, { tool_calls: [toolCallJson({ name: mode.name, arguments: d.text }, 0)] }, extra);
    },
    finishChunks(o: ChoiceOutcome) {
      const done = { finish_reason: o.finishReason, stop_reason: o.stopReason };
      if (mode.kind === 'named') return [{ ...chunkHead, choices: [{ index: o.index, delta: {}, logprobs: null, ...done }] }];
      // No call began (cut before its name): the text as content, as the whole-output parse would answer it.
      if (listOf(o.index).callCount === 0) {
        return [chunk(o.index, { content: texts.get(o.index) ?? '' }), { ...chunkHead, choices: [{ index: o.index, delta: {}, logprobs: null, ...done }] }];
      }
      const finishReason = o.finishReason === 'length' ? 'length' : 'tool_calls';
      return [{ ...chunkHead, choices: [{ index: o.index, delta: {}, logprobs: null, finish_reason: finishReason, stop_reason: o.stopReason }] }];
    },
    usageChunk: (usage: Usage) => usageChunk(h, usage),
    response(outcomes: ChoiceOutcome[], usage: Usage) {
      return chatResponse(r, promptIds, h, outcomes, usage, (o) => {
        const calls = mode.kind === 'named' ? [{ name: mode.name, arguments: o.text }] : requiredCalls(o.text);
        return calls === null ? { message: { content: o.text }, finishReason: o.finishReason } : {
          message: { content: null, tool_calls: calls.map((c) => toolCallJson(c)) },
          finishReason: mode.kind === 'required' ? 'tool_calls' : o.finishReason,
        };
      }, logprobsOf);
    },
  };
}
