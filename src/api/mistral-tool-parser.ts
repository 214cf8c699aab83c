// Tool calls as Mistral models write them (vLLM's `mistral` parser): the content, then the `[TOOL_CALLS]` token
// and the calls, either a JSON list of `{"name": ..., "arguments": {...}}` (Mistral 7B v0.3, tokenizers before
// v11) or, once per call, `[TOOL_CALLS]name[ARGS]{...}` / `[TOOL_CALLS]name{...}` (v11 and later). Calls that do
// not parse leave the whole answer as content. Each call gets a 9-character alphanumeric id, the only kind
// Mistral's chat templates take back. Streamed, the content goes out as it comes (a piece that may begin the
// marker is held) and the calls are held until the answer ends.

import { randomInt } from 'node:crypto';
import type { ExtractedToolCalls, ParsedToolCall, ToolStreamDelta } from './tool-parser.js';

export const MISTRAL_TOOL_CALLS = '[TOOL_CALLS]';
const ARGS = '[ARGS]';
const ID_CHARS = 'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789';

/** A Mistral tool call id: 9 characters of [a-zA-Z0-9] (vLLM's MistralToolCall.generate_random_id). */
export function mistralToolCallId(): string {
  return Array.from({ length: 9 }, () => ID_CHARS[randomInt(ID_CHARS.length)]).join('');
}

function callOf(name: unknown, args: unknown): ParsedToolCall | null {
  if (typeof args === 'string') {
    try {
      args = JSON.parse(args);
    } catch {
      return null;
    }
  }
  if (typeof name !== 'string' || name === '' || args === null || typeof args !== 'object' || Array.isArray(args)) return null;
  return { name, arguments: JSON.stringify(args), id: mistralToolCallId() };
}

/** The calls after the first marker, or null when they do not parse. */
function parseCalls(after: string): ParsedToolCall[] | null {
  const trimmed = after.trim();
  if (trimmed.startsWith('[')) {
    try {
      const list: unknown = JSON.parse(trimmed);
      if (!Array.isArray(list) || list.length === 0) return null;
      const calls = list.map((c) => (c !== null && typeof c === 'object'
        ? callOf((c as { name?: unknown }).name, (c as { arguments?: unknown }).arguments ?? {}) : null));
      return calls.every((c) => c !== null) ? calls as ParsedToolCall[] : null;
    } catch {
      return null;
    }
  }
  const calls: ParsedToolCall[] = [];
  for (const part of trimmed.split(MISTRAL_TOOL_CALLS)) {
    const p = part.trim();
    const at = p.includes(ARGS) ? p.indexOf(ARGS) : p.indexOf('{');
    if (at <= 0) return null;
    const call = callOf(p.slice(0, at).trim(), p.slice(at + (p.startsWith(ARGS, at) ? ARGS.length : 0)));
    if (call === null) return null;
    calls.push(call);
  }
  return calls;
}

export function extractMistralToolCalls(text: string): ExtractedToolCalls {
  const at = text.indexOf(MISTRAL_TOOL_CALLS);
  if (at < 0) return { content: text, calls: [] };
  const calls = parseCalls(text.slice(at + MISTRAL_TOOL_CALLS.length));
  if (calls === null) return { content: text, calls: [] };
  const content = text.slice(0, at);
  return { content: content.trim() === '' ? null : content, calls };
}

export class MistralToolCallStreamParser {
  private text = '';
  /** Characters of text already sent as content. */
  private sent = 0;
  private inCalls = false;
  private numCalls = 0;

  get callCount(): number {
    return this.numCalls;
  }

  push(delta: string): ToolStreamDelta {
    this.text += delta;
    if (this.inCalls) return { content: '', calls: [] };
    const at = this.text.indexOf(MISTRAL_TOOL_CALLS, Math.max(0, this.sent - MISTRAL_TOOL_CALLS.length));
    if (at >= 0) {
      this.inCalls = true;
      const content = this.text.slice(this.sent, at);
      this.sent = at;
      return { content, calls: [] };
    }
    // hold a tail that may begin the marker
    let keep = 0;
    for (let n = Math.min(MISTRAL_TOOL_CALLS.length - 1, this.text.length); n > 0; n--) {
      if (MISTRAL_TOOL_CALLS.startsWith(this.text.slice(this.text.length - n))) {
        keep = n;
        break;
      }
    }
    const upTo = Math.max(this.sent, this.text.length - keep);
    const content = this.text.slice(this.sent, upTo);
    this.sent = upTo;
    return { content, calls: [] };
  }

  finish(): ToolStreamDelta {
    const rest = this.text.slice(this.sent);
    if (!this.inCalls) return { content: rest, calls: [] };
    const calls = parseCalls(rest.slice(MISTRAL_TOOL_CALLS.length));
    if (calls === null) return { content: rest, calls: [] };
    this.numCalls = calls.length;
    return { content: '', calls };
  }
}
