// Engine logprobs -> OpenAI shapes (completions: parallel lists; chat: content entries).

import type { TokenLogprob } from '../engine/types.js';
import type { Tokenizer } from '../loader/types.js';

export interface CompletionLogprobs {
  tokens: string[];
  /** null for an echoed prompt's first token (nothing predicts it), as vLLM. */
  token_logprobs: (number | null)[];
  top_logprobs: (Record<string, number> | null)[];
  text_offset: number[];
}

/** vLLM's prompt_logprobs entry: the prompt token and its top alternatives by id. */
export type PromptLogprobEntry = Record<string, { logprob: number; rank: number; decoded_token: string }>;

export interface ChatLogprobEntry {
  token: string;
  logprob: number;
  bytes: number[];
  top_logprobs: { token: string; logprob: number; bytes: number[] }[];
}

const tokenText = (tok: Tokenizer, id: number) => tok.decode([id], { skipSpecialTokens: false });
/** A token as logprobs name it: its text, or "token_id:<id>" (vLLM's return_tokens_as_token_ids). */
const tokenName = (tok: Tokenizer, id: number, asIds: boolean) => (asIds ? `token_id:${id}` : tokenText(tok, id));
const utf8Bytes = (s: string) => Array.from(Buffer.from(s, 'utf8'));

/**
 * The sampled token and the `numTop` most likely ones, keyed by text; with `prompt`, the echoed prompt's tokens
 * first (its ids and their prompt logprobs, null for the first). Text offsets count the tokens' texts from
 * `textOffset`.
 */
export function completionLogprobs(tok: Tokenizer, lps: readonly TokenLogprob[], numTop: number, textOffset: number,
  prompt?: { ids: readonly number[]; logprobs: readonly (TokenLogprob | null)[] }, asIds = false): CompletionLogprobs {
  const out: CompletionLogprobs = { tokens: [], token_logprobs: [], top_logprobs: [], text_offset: [] };
  let offset = textOffset;
  const push = (id: number, lp: TokenLogprob | null) => {
    const text = tokenName(tok, id, asIds);
    let top: Record<string, number> | null = null;
    if (lp !== null) {
      top = {};
      for (const t of lp.top.slice(0, numTop)) top[tokenName(tok, t.tokenId, asIds)] ??= t.logprob;
      top[text] ??= lp.logprob;
    }
    out.tokens.push(text);
    out.token_logprobs.push(lp === null ? null : lp.logprob);
    out.top_logprobs.push(top);
    out.text_offset.push(offset);
    offset += text.length;
  };
  prompt?.ids.forEach((id, i) => push(id, prompt.logprobs[i] ?? null));
  for (const lp of lps) push(lp.tokenId, lp);
  return out;
}

/** Where the text after these logprobs' tokens starts (their last offset plus its token's length). */
export function offsetAfter(l: CompletionLogprobs, textOffset: number): number {
  const n = l.tokens.length;
  return n === 0 ? textOffset : l.text_offset[n - 1]! + l.tokens[n - 1]!.length;
}

/** vLLM's prompt_logprobs: per prompt token null (the first) or its id's and its top alternatives' entries. */
export function promptLogprobsJson(tok: Tokenizer, lps: readonly (TokenLogprob | null)[]): (PromptLogprobEntry | null)[] {
  return lps.map((lp) => {
    if (lp === null) return null;
    const entry: PromptLogprobEntry = {};
    lp.top.forEach((t, i) => { entry[t.tokenId] = { logprob: t.logprob, rank: i + 1, decoded_token: tokenText(tok, t.tokenId) }; });
    entry[lp.tokenId] = { logprob: lp.logprob, rank: lp.rank ?? 1, decoded_token: tokenText(tok, lp.tokenId) };
    return entry;
  });
}

export function chatLogprobs(tok: Tokenizer, lps: readonly TokenLogprob[], numTop: number, asIds = false):
  { content: ChatLogprobEntry[] } {
  return {
    content: lps.map((lp) => {
      const text = tokenName(tok, lp.tokenId, asIds);
      return {
        token: text,
        logprob: lp.logprob,
        bytes: utf8Bytes(text),
        top_logprobs: lp.top.slice(0, numTop).map((t) => {
          const s = tokenName(tok, t.tokenId, asIds);
          return { token: s, logprob: t.logprob, bytes: utf8Bytes(s) };
        }),
      };
    }),
  };
}
