// A chat choice's text as the parsers configured for the request see it: reasoning first (the thinking goes to
// `reasoning_content`), then tool calls in what remains (vLLM runs its parsers in the same order).

import { extractLlama3ToolCalls, Llama3ToolCallStreamParser } from './llama3-tool-parser.js';
import { extractMistralToolCalls, MistralToolCallStreamParser } from './mistral-tool-parser.js';
import { ReasoningStreamSplitter, splitReasoning } from './reasoning.js';
import { extractToolCalls, ToolCallStreamParser, type ExtractedToolCalls, type ParsedToolCall, type ToolStreamDelta } from './tool-parser.js';
import type { ToolCallParserName } from './tools.js';

interface ToolStreamParser {
  readonly callCount: number;
  push(text: string): ToolStreamDelta;
  finish(): ToolStreamDelta;
}

/** Each --tool-call-parser: the whole-output parse and the stream parser. */
const TOOL_PARSERS: Record<ToolCallParserName, { extract(text: string): ExtractedToolCalls; stream(): ToolStreamParser }> = {
  hermes: { extract: extractToolCalls, stream: () => new ToolCallStreamParser() },
  llama3_json: { extract: extractLlama3ToolCalls, stream: () => new Llama3ToolCallStreamParser() },
  mistral: { extract: extractMistralToolCalls, stream: () => new MistralToolCallStreamParser() },
};

export interface ChatOutputOptions {
  /** Split reasoning out (a reasoning parser is on). */
  reasoning: boolean;
  /** The prompt left a `<think>` block open. */
  startsInReasoning: boolean;
  /** Parse tool calls out of the content with this parser; null: no. */
  tools: ToolCallParserName | null;
}

export interface ChatOutput {
  reasoning: string | null;
  content: string | null;
  calls: ParsedToolCall[];
}

/** A whole output. */
export function parseChatOutput(text: string, o: ChatOutputOptions): ChatOutput {
  const { reasoning, content } = o.reasoning ? splitReasoning(text, o.startsInReasoning) : { reasoning: null, content: text };
  if (o.tools === null || content === null) return { reasoning, content, calls: [] };
  return { reasoning, ...TOOL_PARSERS[o.tools].extract(content) };
}

export interface ChatOutputDelta {
  reasoning: string;
  content: string;
  calls: ParsedToolCall[];
  /** Index of calls[0] among the choice's calls. */
  firstCall: number;
}

/** The same over a stream of text deltas. */
export class ChatOutputStream {
  private readonly splitter: ReasoningStreamSplitter | null;
  private readonly tools: ToolStreamParser | null;

  constructor(o: ChatOutputOptions) {
    this.splitter = o.reasoning ? new ReasoningStreamSplitter(o.startsInReasoning) : null;
    this.tools = o.tools === null ? null : TOOL_PARSERS[o.tools].stream();
  }

  /** Calls sent so far. */
  get callCount(): number {
    return this.tools?.callCount ?? 0;
  }

  push(text: string): ChatOutputDelta {
    const r = this.splitter ? this.splitter.push(text) : { reasoning: '', content: text };
    return this.contentDelta(r.reasoning, this.tools ? this.tools.push(r.content) : { content: r.content, calls: [] });
  }

  finish(): ChatOutputDelta {
    const r = this.splitter ? this.splitter.finish() : { reasoning: '', content: '' };
    if (this.tools === null) return this.contentDelta(r.reasoning, { content: r.content, calls: [] });
    const a = this.tools.push(r.content);
    const b = this.tools.finish();
    return this.contentDelta(r.reasoning, { content: a.content + b.content, calls: [...a.calls, ...b.calls] });
  }

  private contentDelta(reasoning: string, c: { content: string; calls: ParsedToolCall[] }): ChatOutputDelta {
    return { reasoning, content: c.content, calls: c.calls, firstCall: this.callCount - c.calls.length };
  }
}
