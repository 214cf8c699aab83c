// The shapes every chat answer shares, whatever turns its text into a message (plain, parsed, or a forced tool
// call): the chunk header, the opening role chunks, the usage chunk, and the response around its choices.

import type { ChoiceOutcome } from '../generation.js';
import type { ChatRequest } from '../schemas.js';
import type { Usage } from '../serve.js';

export interface Header {
  id: string;
  model: string;
  created: number;
}

export const chunkHeadOf = (h: Header) => ({ id: h.id, object: 'chat.completion.chunk', created: h.created, model: h.model });

/** One role chunk a choice (with chat echo's text), the prompt's token ids on the first when asked. */
export function openingChunks(r: ChatRequest, promptIds: number[], h: Header): unknown[] {
  return Array.from({ length: r.n }, (_, index) => ({
    ...chunkHeadOf(h),
    choices: [{ index, delta: { role: 'assistant', content: r.echoText }, logprobs: null, finish_reason: null }],
    ...(r.returnTokenIds && index === 0 ? { prompt_token_ids: promptIds } : {}),
  }));
}

export const usageChunk = (h: Header, usage: Usage) => ({ ...chunkHeadOf(h), choices: [], usage });

/** A choice's message and finish reason, as its formatter reads the text. */
export interface ChoiceMessage {
  message: Record<string, unknown>;
  finishReason: string;
}

/** The non-streamed response: each choice's message from `messageOf`, the rest the same for every formatter. */
export function chatResponse(r: ChatRequest, promptIds: number[], h: Header, outcomes: ChoiceOutcome[], usage: Usage,
  messageOf: (o: ChoiceOutcome) => ChoiceMessage, logprobsOf: (o: ChoiceOutcome) => unknown): unknown {
  return {
    id: h.id, object: 'chat.completion', created: h.created, model: h.model,
    choices: outcomes.map((o) => {
      const m = messageOf(o);
      return {
        index: o.index, message: { role: 'assistant', ...m.message }, logprobs: logprobsOf(o), finish_reason: m.finishReason,
        stop_reason: o.stopReason, ...(r.returnTokenIds ? { token_ids: o.tokenIds } : {}),
      };
    }),
    usage,
    ...(r.returnTokenIds ? { prompt_token_ids: promptIds } : {}),
  };
}
