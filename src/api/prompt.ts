// Prompt checks and engine requests: vocabulary, context length, n choices.

import { randomUUID } from 'node:crypto';
import type { EngineRequest } from '../engine/types.js';
import type { SamplingParams } from '../sampling/params.js';
import { badRequest } from './errors.js';
import type { GenerationFields } from './schemas.js';

export function checkTokenIds(ids: readonly number[], vocabSize: number, param: string): void {
  const bad = ids.filter((id) => id < 0 || id >= vocabSize);
  if (bad.length > 0) {
    const shown = bad.slice(0, 10).join(', ') + (bad.length > 10 ? `, ... (${bad.length} in all)` : '');
    throw badRequest(`\`${param}\` has token ids outside the vocabulary [0, ${vocabSize}): ${shown}.`, param);
  }
}

/** The prompt's last `k` tokens (truncate_prompt_tokens; -1: the context length), or the prompt when k is null. */
export function truncatePrompt(ids: number[], k: number | null, maxModelLen: number): number[] {
  if (k === null) return ids;
  const keep = k === -1 ? maxModelLen : k;
  if (keep > maxModelLen) {
    throw badRequest(`truncate_prompt_tokens value (${keep}) is greater than max_model_len (${maxModelLen}). ` +
      'Please select a smaller truncation size.', 'truncate_prompt_tokens');
  }
  return ids.length > keep ? ids.slice(ids.length - keep) : ids;
}

/** max_tokens as given, or all of the context the prompt leaves (as vLLM). */
export function resolveMaxTokens(numPromptTokens: number, requested: number | null, maxModelLen: number, promptParam: string): number {
  if (numPromptTokens >= maxModelLen) {
    throw badRequest(
      `This model's maximum context length is ${maxModelLen} tokens, and the prompt has ${numPromptTokens} tokens, leaving no room to generate.`,
      promptParam, 'context_length_exceeded');
  }
  if (requested !== null && numPromptTokens + requested > maxModelLen) {
    throw badRequest(
      `This model's maximum context length is ${maxModelLen} tokens. However, you requested ${numPromptTokens + requested} tokens ` +
        `(${numPromptTokens} in the prompt, ${requested} for the completion). Please reduce the prompt or max_tokens.`,
      'max_tokens', 'context_length_exceeded');
  }
  return requested ?? maxModelLen - numPromptTokens;
}

/**
 * A request whose prompt and max_tokens together need more KV cache than the engine has can never be scheduled: a
 * 400 (the engine would refuse it too), not a wait without end. `kvCacheTokens` null: not known, nothing checked.
 */
export function checkFitsKvCache(kvCacheTokens: number | null, numPromptTokens: number, maxTokens: number, promptParam: string): void {
  if (kvCacheTokens === null || numPromptTokens + maxTokens <= kvCacheTokens) return;
  throw badRequest(`This request needs up to ${numPromptTokens + maxTokens} tokens of KV cache (${numPromptTokens} in the `
    + `prompt, ${maxTokens} for the completion), but the server's KV cache holds ${kvCacheTokens} tokens in all. `
    + 'Please reduce the prompt or max_tokens.', numPromptTokens > kvCacheTokens ? promptParam : 'max_tokens', 'kv_cache_exceeded');
}

export function newResponseId(prefix: 'cmpl' | 'chatcmpl'): string {
  return `${prefix}-${randomUUID().replaceAll('-', '')}`;
}

/** n engine requests for one prompt; with a seed, choice i gets seed + i. */
export function choiceRequests(
  responseId: string,
  promptIndex: number,
  promptTokenIds: number[],
  sampling: SamplingParams,
  fields: GenerationFields,
  arrivalTime: number,
): EngineRequest[] {
  const reqs: EngineRequest[] = [];
  for (let i = 0; i < fields.n; i++) {
    const seed = sampling.seed === null ? null : sampling.seed + i;
    reqs.push({
      requestId: `${responseId}-${promptIndex}-${i}`,
      promptTokenIds,
      sampling: { ...sampling, seed, stop: [...sampling.stop], stopTokenIds: [...sampling.stopTokenIds] },
      priority: fields.priority,
      cacheSalt: fields.cacheSalt,
      arrivalTime,
    });
  }
  return reqs;
}
