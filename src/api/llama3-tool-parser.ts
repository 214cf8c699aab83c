// Tool calls as Llama 3.1+ writes them (vLLM's `llama3_json` parser): an answer that starts with `{` or
// `<|python_tag|>` is a list of JSON calls, `{"name": ..., "parameters": {...}}` (or "arguments"), separated by
// `;`; anything else is content. A call list that does not parse is content too. Streamed, content goes out as it
// comes; a call list is held until the answer ends (its calls are sent then, whole).

import type { ExtractedToolCalls, ParsedToolCall, ToolStreamDelta } from './tool-parser.js';

export const PYTHON_TAG = '<|python_tag|>';

/** End of the JSON object that starts at `from` (a `{`), or -1 when it does not close. */
function objectEnd(text: string, from: number): number {
  let depth = 0;
  let inString = false;
  for (let i = from; i < text.length; i++) {
    const c = text[i];
    if (inString) {
      if (c === '\\') i++;
      else if (c === '"') inString = false;
    } else if (c === '"') inString = true;
    else if (c === '{' || c === '[') depth++;
    else if (c === '}' || c === ']') {
      if (--depth === 0) return i + 1;
    }
  }
  return -1;
}

function callOf(v: unknown): ParsedToolCall | null {
  if (v === null || typeof v !== 'object' || Array.isArray(v)) return null;
  const o = v as { name?: unknown; parameters?: unknown; arguments?: unknown };
  const args = o.arguments ?? o.parameters ?? {};
  if (typeof o.name !== 'string' || o.name === '' || args === null || typeof args !== 'object' || Array.isArray(args)) return null;
  return { name: o.name, arguments: JSON.stringify(args) };
}

/** Whether an answer starting with `text` is (or may yet be) a call list. */
function startsCalls(text: string): boolean {
  return text.startsWith('{') || text.startsWith(PYTHON_TAG);
}

export function extractLlama3ToolCalls(text: string): ExtractedToolCalls {
  if (!startsCalls(text)) return { content: text, calls: [] };
  const calls: ParsedToolCall[] = [];
  let at = text.startsWith(PYTHON_TAG) ? PYTHON_TAG.length : 0;
  for (;;) {
    while (at < text.length && /[\s;]/.test(text[at]!)) at++;
    if (at >= text.length) break;
    const end = text[at] === '{' ? objectEnd(text, at) : -1;
    let call: ParsedToolCall | null = null;
    if (end > 0) {
      try {
        call = callOf(JSON.parse(text.slice(at, end)));
      } catch {
        call = null;
      }
    }
    if (call === null) return { content: text, calls: [] };
    calls.push(call);
    at = end;
  }
  return calls.length > 0 ? { content: null, calls } : { content: text, calls: [] };
}

export class Llama3ToolCallStreamParser {
  private text = '';
  /** null until the answer's start decides: content, or a call list held to the end. */
  private mode: 'content' | 'calls' | null = null;
  private numCalls = 0;

  get callCount(): number {
    return this.numCalls;
  }

  push(delta: string): ToolStreamDelta {
    this.text += delta;
    if (this.mode === null) {
      if (this.text === '' || (this.text.length < PYTHON_TAG.length && PYTHON_TAG.startsWith(this.text) && !this.text.startsWith('{'))) {
        return { content: '', calls: [] };
      }
      this.mode = startsCalls(this.text) ? 'calls' : 'content';
      if (this.mode === 'content') return { content: this.text, calls: [] };
      return { content: '', calls: [] };
    }
    return this.mode === 'content' ? { content: delta, calls: [] } : { content: '', calls: [] };
  }

  finish(): ToolStreamDelta {
    if (this.mode === 'content') return { content: '', calls: [] };
    const e = extractLlama3ToolCalls(this.text);
    this.numCalls = e.calls.length;
    return { content: e.content ?? '', calls: e.calls };
  }
}
