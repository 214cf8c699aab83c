// quire chat's history: turns kept while they fit the context. The oldest turns go first, so prompt plus max_tokens
// never exceeds the context length (the engine would refuse the request).

import type { ChatMessage } from '../loader/types.js';

export interface ChatTurn {
  user: string;
  assistant: string | null;
}

/** What one answer is asked with: the prompt rendered from what fits, and the notes the user is shown. */
export interface FittedPrompt {
  prompt: string;
  numPromptTokens: number;
  maxTokens: number;
  numDroppedTurns: number;
}

/** The latest message alone does not fit: nothing is sent. */
export interface TooLong {
  tooLong: true;
  numPromptTokens: number;
}

export interface ContextLimits {
  maxModelLen: number;
  /** New tokens an answer asks for (--max-tokens). */
  maxTokens: number;
  /** The fewest new tokens worth asking for when the context is nearly full. */
  minAnswerTokens?: number;
}

export function chatMessages(system: string | null, turns: readonly ChatTurn[]): ChatMessage[] {
  const messages: ChatMessage[] = system === null ? [] : [{ role: 'system', content: system }];
  for (const t of turns) {
    messages.push({ role: 'user', content: t.user });
    if (t.assistant !== null) messages.push({ role: 'assistant', content: t.assistant });
  }
  return messages;
}

/**
 * Drops the oldest turns of `turns` (in place) until the rendered prompt plus max_tokens fits the context; when the
 * latest turn alone leaves less than max_tokens, the answer gets what is left (at least minAnswerTokens), else the
 * latest turn is removed and TooLong comes back. A max_tokens of more than half the context keeps history while the
 * prompt is within half of it, and each answer gets what the context leaves.
 */
export async function fitToContext(system: string | null, turns: ChatTurn[], limits: ContextLimits,
  render: (messages: ChatMessage[]) => Promise<string>, countTokens: (prompt: string) => number,
): Promise<FittedPrompt | TooLong> {
  const minAnswer = Math.max(1, limits.minAnswerTokens ?? 16);
  const reserve = Math.min(limits.maxTokens, Math.floor(limits.maxModelLen / 2));
  let numDroppedTurns = 0;
  for (;;) {
    const prompt = await render(chatMessages(system, turns));
    const numPromptTokens = countTokens(prompt);
    const room = limits.maxModelLen - numPromptTokens;
    if (room >= reserve) return { prompt, numPromptTokens, maxTokens: Math.min(limits.maxTokens, room), numDroppedTurns };
    if (turns.length > 1) {
      turns.shift();
      numDroppedTurns++;
      continue;
    }
    if (room >= minAnswer) return { prompt, numPromptTokens, maxTokens: room, numDroppedTurns };
    turns.pop();
    return { tooLong: true, numPromptTokens };
  }
}
