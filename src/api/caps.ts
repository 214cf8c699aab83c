// Caps on what one request may carry, checked on the parsed body before anything costs time (tokenizing, a chat
// template, a grammar): each a 400 in OpenAI's shape naming the field, the size sent and the limit with its flag.

import { badRequest } from './errors.js';
import type { ServerLimits } from './options.js';
import { isObject, type Body } from './schemas.js';

/** The caps a request's lists and strings are held to (each a `quire serve` flag). */
export interface RequestCaps {
  /** Characters of all prompts (and message contents, instructions, inputs) together; null: 32 x max_model_len. */
  maxPromptChars: number | null;
  maxMessages: number;
  maxTools: number;
  /** Characters of one stop string or one bad word. */
  maxStopStrLen: number;
  maxBadWords: number;
  maxLogitBias: number;
  maxAllowedTokenIds: number;
  maxStopTokenIds: number;
}

export const DEFAULT_CAPS: RequestCaps = {
  maxPromptChars: null,
  maxMessages: 2048,
  maxTools: 128,
  maxStopStrLen: 1024,
  maxBadWords: 256,
  maxLogitBias: 1024,
  maxAllowedTokenIds: 262144,
  maxStopTokenIds: 1024,
};

/** --max-prompt-chars as it applies: the flag, or 32 characters per token of the context (at least 64 Ki). */
export function promptCharCap(limits: ServerLimits, maxModelLen: number): number {
  return limits.maxPromptChars ?? Math.max(65536, 32 * maxModelLen);
}

function over(field: string, what: string, n: number, max: number, flag: string): never {
  throw badRequest(`\`${field}\` has ${n} ${what}; at most ${max} are allowed (${flag}).`, field, 'request_too_large');
}

/** Characters of the text a message's content holds (a string, or text parts). */
function contentChars(content: unknown): number {
  if (typeof content === 'string') return content.length;
  if (!Array.isArray(content)) return 0;
  let n = 0;
  for (const p of content) if (isObject(p) && typeof p.text === 'string') n += p.text.length;
  return n;
}

/** Characters of a prompt-like field: a string, strings, or a Responses `input` of items with content. */
function promptChars(v: unknown): number {
  if (typeof v === 'string') return v.length;
  if (!Array.isArray(v)) return 0;
  let n = 0;
  for (const x of v) {
    if (typeof x === 'string') n += x.length;
    else if (isObject(x)) n += contentChars(x.content) + (typeof x.output === 'string' ? x.output.length : 0);
  }
  return n;
}

function listCap(b: Body, field: string, what: string, max: number, flag: string): void {
  const v = b[field];
  if (Array.isArray(v) && v.length > max) over(field, what, v.length, max, flag);
}

/** Refuses a request body beyond any cap (a body that is not an object is left to the route's own 400). */
export function checkRequestCaps(body: unknown, limits: ServerLimits, maxModelLen: number): void {
  if (!isObject(body)) return;
  const b = body;
  listCap(b, 'messages', 'messages', limits.maxMessages, '--max-messages');
  listCap(b, 'tools', 'tools', limits.maxTools, '--max-tools');
  listCap(b, 'bad_words', 'words', limits.maxBadWords, '--max-bad-words');
  listCap(b, 'allowed_token_ids', 'token ids', limits.maxAllowedTokenIds, '--max-allowed-token-ids');
  listCap(b, 'stop_token_ids', 'token ids', limits.maxStopTokenIds, '--max-stop-token-ids');
  listCap(b, 'stop', 'strings', limits.maxStopStrings, '--max-stop-strings');
  if (isObject(b.logit_bias)) {
    const n = Object.keys(b.logit_bias).length;
    if (n > limits.maxLogitBias) over('logit_bias', 'entries', n, limits.maxLogitBias, '--max-logit-bias');
  }
  for (const field of ['stop', 'bad_words']) {
    const v = b[field];
    for (const s of typeof v === 'string' ? [v] : Array.isArray(v) ? v : []) {
      if (typeof s === 'string' && s.length > limits.maxStopStrLen) {
        throw badRequest(`\`${field}\` holds a string of ${s.length} characters; at most ${limits.maxStopStrLen} are allowed `
          + '(--max-stop-str-len).', field, 'request_too_large');
      }
    }
  }
  const cap = promptCharCap(limits, maxModelLen);
  let chars = 0;
  let field = 'prompt';
  for (const f of ['prompt', 'input', 'instructions']) {
    const n = promptChars(b[f]);
    if (n > 0) field = f;
    chars += n;
  }
  if (Array.isArray(b.messages)) {
    field = 'messages';
    for (const m of b.messages) if (isObject(m)) chars += contentChars(m.content);
  }
  if (chars > cap) over(field, 'characters', chars, cap, '--max-prompt-chars');
}
