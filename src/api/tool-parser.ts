// Tool calls out of generated text, Hermes style (Qwen2.5/Qwen3, Hermes 2 Pro+):
// `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`, one block per call.
// As vLLM's `hermes` parser: the content is the text before the first block,
// the text between and after blocks is dropped, and a last block left open by
// the end of generation still counts when its JSON is whole.

export const TOOL_CALL_START = '<tool_call>';
export const TOOL_CALL_END = '</tool_call>';

export interface ParsedToolCall {
  name: string;
  /** The arguments as a JSON string (OpenAI's shape). */
  arguments: string;
  /** The call's id where the parser's model needs a kind of its own (Mistral's 9 characters); else a fresh one. */
  id?: string;
}

/** One block's JSON, or null when it is not a call. */
export function parseCallBody(body: string): ParsedToolCall | null {
  let v: unknown;
  try {
    v = JSON.parse(body);
  } catch {
    return null;
  }
  if (v === null || typeof v !== 'object' || Array.isArray(v)) return null;
  const { name, arguments: args } = v as { name?: unknown; arguments?: unknown };
  if (typeof name !== 'string' || name === '') return null;
  if (args !== undefined && (args === null || typeof args !== 'object' || Array.isArray(args))) return null;
  return { name, arguments: JSON.stringify(args ?? {}) };
}

export interface ExtractedToolCalls {
  /** Text before the first call; null when there is none. */
  content: string | null;
  calls: ParsedToolCall[];
}

/** A whole output. No calls (the text is all content) when any block fails to parse, as vLLM. */
export function extractToolCalls(text: string): ExtractedToolCalls {
  const first = text.indexOf(TOOL_CALL_START);
  if (first < 0) return { content: text, calls: [] };
  const calls: ParsedToolCall[] = [];
  let at = first;
  while (at >= 0) {
    const bodyStart = at + TOOL_CALL_START.length;
    const end = text.indexOf(TOOL_CALL_END, bodyStart);
    const call = parseCallBody(text.slice(bodyStart, end < 0 ? text.length : end));
    if (call === null) return { content: text, calls: [] };
    calls.push(call);
    at = end < 0 ? -1 : text.indexOf(TOOL_CALL_START, end + TOOL_CALL_END.length);
  }
  return { content: first > 0 ? text.slice(0, first) : null, calls };
}

export interface ToolStreamDelta {
  content: string;
  calls: ParsedToolCall[];
}

/** Length of the longest end of `s` that begins `tag` (text that may yet become the tag). */
export function partialTagAtEnd(s: string, tag: string): number {
  for (let n = Math.min(s.length, tag.length - 1); n > 0; n--) {
    if (s.endsWith(tag.slice(0, n))) return n;
  }
  return 0;
}

/**
 * The same parse over a stream of text deltas: content streams as it comes (holding back only what may be the
 * start of a `<tool_call>`), each call is sent whole once its block closes. A block that does not parse is sent
 * as content (a stream cannot take back the calls before it).
 */
export class ToolCallStreamParser {
  private pending = '';
  private inCall = false;
  private seenCall = false;
  private numCalls = 0;

  /** Calls sent so far. */
  get callCount(): number {
    return this.numCalls;
  }

  push(delta: string): ToolStreamDelta {
    this.pending += delta;
    const out: ToolStreamDelta = { content: '', calls: [] };
    for (;;) {
      if (this.inCall) {
        const end = this.pending.indexOf(TOOL_CALL_END);
        if (end < 0) return out;
        this.closeCall(this.pending.slice(0, end), out, true);
        this.pending = this.pending.slice(end + TOOL_CALL_END.length);
        continue;
      }
      const start = this.pending.indexOf(TOOL_CALL_START);
      if (start >= 0) {
        if (!this.seenCall) out.content += this.pending.slice(0, start);
        this.pending = this.pending.slice(start + TOOL_CALL_START.length);
        this.inCall = true;
        this.seenCall = true;
        continue;
      }
      const keep = partialTagAtEnd(this.pending, TOOL_CALL_START);
      if (!this.seenCall) out.content += this.pending.slice(0, this.pending.length - keep);
      this.pending = this.pending.slice(this.pending.length - keep);
      return out;
    }
  }

  /** The end of generation: an open block is parsed as it stands, held-back text is released. */
  finish(): ToolStreamDelta {
    const out: ToolStreamDelta = { content: '', calls: [] };
    if (this.inCall) this.closeCall(this.pending, out, false);
    else if (!this.seenCall) out.content += this.pending;
    this.pending = '';
    this.inCall = false;
    return out;
  }

  private closeCall(body: string, out: ToolStreamDelta, closed: boolean): void {
    this.inCall = false;
    const call = parseCallBody(body);
    if (call === null) {
      out.content += TOOL_CALL_START + body + (closed ? TOOL_CALL_END : '');
      return;
    }
    out.calls.push(call);
    this.numCalls++;
  }
}
