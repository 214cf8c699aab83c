// Reasoning out of generated text (vLLM's --reasoning-parser qwen3 / deepseek_r1): a model that thinks writes
// `<think>...</think>` before its answer, or only `...</think>` when the chat template already opened the block
// (Qwen3 thinking-only models, DeepSeek-R1). The thinking goes to `reasoning_content`, the rest to `content`.
// Thinking is on when the prompt ends inside an open `<think>` or the output starts with one; otherwise the whole
// output is content (Qwen3 with enable_thinking false: the template closes an empty block in the prompt).

import type { Tokenizer } from '../loader/types.js';
import { partialTagAtEnd } from './tool-parser.js';

export const REASONING_PARSERS = ['qwen3', 'deepseek_r1'] as const;
export type ReasoningParserName = (typeof REASONING_PARSERS)[number];

export const THINK_START = '<think>';
export const THINK_END = '</think>';

/** Whether a rendered prompt leaves a `<think>` block open for the model to continue. */
export function promptOpensThinking(prompt: string): boolean {
  const at = prompt.lastIndexOf(THINK_START);
  return at >= 0 && !prompt.includes(THINK_END, at) && prompt.slice(at + THINK_START.length).trim() === '';
}

/**
 * The token a structured output waits for (vLLM enforces the format after the reasoning ends): `</think>`'s id when
 * it is one token and the prompt leaves the model room to think (it did not close an empty block itself, as Qwen3's
 * template does with enable_thinking false); undefined when the format holds from the first token.
 */
export function reasoningEndToken(tokenizer: Pick<Tokenizer, 'encode'>, prompt: string): number | undefined {
  const ids = tokenizer.encode(THINK_END, { addSpecialTokens: false });
  if (ids.length !== 1 || prompt.trimEnd().endsWith(THINK_END)) return undefined;
  return ids[0];
}

export interface SplitReasoning {
  /** null when the output did not think. */
  reasoning: string | null;
  /** null when nothing follows the thinking. */
  content: string | null;
}

/** A whole output. */
export function splitReasoning(text: string, startsInside: boolean): SplitReasoning {
  let body = text;
  if (!startsInside) {
    if (!text.startsWith(THINK_START)) return { reasoning: null, content: text };
    body = text.slice(THINK_START.length);
  }
  const end = body.indexOf(THINK_END);
  if (end < 0) return { reasoning: body, content: null };
  const content = body.slice(end + THINK_END.length);
  return { reasoning: body.slice(0, end), content: content === '' ? null : content };
}

export interface ReasoningDelta {
  reasoning: string;
  content: string;
}

/** The same split over a stream of text deltas, holding back only what may be the start of a tag. */
export class ReasoningStreamSplitter {
  /** 'start': may yet open with <think>; 'inside': thinking; 'after': content. */
  private state: 'start' | 'inside' | 'after';
  private pending = '';

  constructor(startsInside: boolean) {
    this.state = startsInside ? 'inside' : 'start';
  }

  push(delta: string): ReasoningDelta {
    this.pending += delta;
    const out: ReasoningDelta = { reasoning: '', content: '' };
    if (this.state === 'start') {
      if (this.pending.length < THINK_START.length && THINK_START.startsWith(this.pending)) return out;
      if (this.pending.startsWith(THINK_START)) {
        this.pending = this.pending.slice(THINK_START.length);
        this.state = 'inside';
      } else {
        this.state = 'after';
      }
    }
    if (this.state === 'inside') {
      const end = this.pending.indexOf(THINK_END);
      if (end < 0) {
        const keep = partialTagAtEnd(this.pending, THINK_END);
        out.reasoning = this.pending.slice(0, this.pending.length - keep);
        this.pending = this.pending.slice(this.pending.length - keep);
        return out;
      }
      out.reasoning = this.pending.slice(0, end);
      this.pending = this.pending.slice(end + THINK_END.length);
      this.state = 'after';
    }
    out.content = this.pending;
    this.pending = '';
    return out;
  }

  /** The end of generation: held-back text is released where it stands. */
  finish(): ReasoningDelta {
    const rest = this.pending;
    this.pending = '';
    return this.state === 'inside' ? { reasoning: rest, content: '' } : { reasoning: '', content: rest };
  }
}
