// Engine logprobs -> OpenAI shapes (completions: parallel lists; chat: content entries).

import type { TokenLogprob } from '../engine/types.js';
import type { Tokenizer } from '../loader/types.js';

export interface CompletionLogprobs {
  tokens: string[];
  token_logprobs: number[];
  top_logprobs: Record<string, number>[];
  text_offset: number[];
}

export interface ChatLogprobEntry {
  token: string;
  logprob: number;
  bytes: number[];
  top_logprobs: { token: string; logprob: number; bytes: number[] }[];
}

const tokenText = (tok: Tokenizer, id: number) => tok.decode([id], { skipSpecialTokens: false });
const utf8Bytes = (s: string) => Array.from(Buffer.from(s, 'utf8'));

/** The sampled token and the `numTop` most likely ones, keyed by text. */
export function completionLogprobs(tok: Tokenizer, lps: readonly TokenLogprob[], numTop: number, textOffset: number): CompletionLogprobs {
  const out: CompletionLogprobs = { tokens: [], token_logprobs: [], top_logprobs: [], text_offset: [] };
  let offset = textOffset;
  for (const lp of lps) {
    const text = tokenText(tok, lp.tokenId);
    const top: Record<string, number> = {};
    for (const t of lp.top.slice(0, numTop)) top[tokenText(tok, t.tokenId)] ??= t.logprob;
    top[text] ??= lp.logprob;
    out.tokens.push(text);
    out.token_logprobs.push(lp.logprob);
    out.top_logprobs.push(top);
    out.text_offset.push(offset);
    offset += text.length;
  }
  return out;
}

export function chatLogprobs(tok: Tokenizer, lps: readonly TokenLogprob[], numTop: number): { content: ChatLogprobEntry[] } {
  return {
    content: lps.map((lp) => {
      const text = tokenText(tok, lp.tokenId);
      return {
        token: text,
        logprob: lp.logprob,
        bytes: utf8Bytes(text),
        top_logprobs: lp.top.slice(0, numTop).map((t) => {
          const s = tokenText(tok, t.tokenId);
          return { token: s, logprob: t.logprob, bytes: utf8Bytes(s) };
        }),
      };
    }),
  };
}
