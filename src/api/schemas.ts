// Request bodies -> typed requests. Every mistake is a 400 naming its field;
// unknown fields are ignored.

import type { ChatMessage } from '../loader/types.js';
import { badRequest } from './errors.js';
import type { ServerLimits } from './options.js';
import { parseMessageToolCalls, parseToolChoice, parseTools, type ToolChoice, type ToolDefinition } from './tools.js';

export type Body = Record<string, unknown>;

export const isObject = (v: unknown): v is Body => v !== null && typeof v === 'object' && !Array.isArray(v);

export function asObjectBody(body: unknown): Body {
  if (body === null || typeof body !== 'object' || Array.isArray(body)) {
    throw badRequest('Request body must be a JSON object.', null, 'invalid_json');
  }
  return body as Body;
}

const isInt = (v: unknown): v is number => typeof v === 'number' && Number.isInteger(v);

export function optNumber(b: Body, name: string): number | null {
  const v = b[name];
  if (v === undefined || v === null) return null;
  if (typeof v !== 'number' || !Number.isFinite(v)) throw badRequest(`\`${name}\` must be a number.`, name);
  return v;
}

export function optInt(b: Body, name: string, min: number, max = Number.MAX_SAFE_INTEGER): number | null {
  const v = b[name];
  if (v === undefined || v === null) return null;
  if (!isInt(v)) throw badRequest(`\`${name}\` must be an integer.`, name);
  if (v < min || v > max) {
    const range = max === Number.MAX_SAFE_INTEGER ? `>= ${min}` : `between ${min} and ${max}`;
    throw badRequest(`\`${name}\` must be ${range}, got ${v}.`, name);
  }
  return v;
}

export function optBool(b: Body, name: string): boolean | null {
  const v = b[name];
  if (v === undefined || v === null) return null;
  if (typeof v !== 'boolean') throw badRequest(`\`${name}\` must be a boolean.`, name);
  return v;
}

export function optString(b: Body, name: string): string | null {
  const v = b[name];
  if (v === undefined || v === null) return null;
  if (typeof v !== 'string') throw badRequest(`\`${name}\` must be a string.`, name);
  return v;
}

export function optIntList(b: Body, name: string): number[] | null {
  const v = b[name];
  if (v === undefined || v === null) return null;
  if (!Array.isArray(v) || !v.every(isInt)) throw badRequest(`\`${name}\` must be a list of integers.`, name);
  return v;
}

export interface GenerationFields {
  model: string | null;
  /** max_completion_tokens or max_tokens; null = up to the context length. */
  maxTokens: number | null;
  n: number;
  stream: boolean;
  includeUsage: boolean;
  /** vLLM's stream_options.continuous_usage_stats: usage in every chunk (with include_usage). */
  continuousUsage: boolean;
  returnTokenIds: boolean;
  priority: number;
  cacheSalt: string | null;
  user: string | null;
  /** vLLM's prompt_logprobs: top logprobs per prompt token; null = none. */
  promptLogprobs: number | null;
  /** vLLM's truncate_prompt_tokens: keep the prompt's last k tokens (-1: max_model_len); null = off. */
  truncatePromptTokens: number | null;
  /** vLLM's return_tokens_as_token_ids: logprobs name tokens "token_id:<id>"; null: the server's default. */
  returnTokensAsTokenIds: boolean | null;
}

export interface CompletionRequest extends GenerationFields {
  /** Each prompt as text or as token ids. */
  prompts: (string | number[])[];
  echo: boolean;
  /** echo with max_tokens 0: the prompt comes back and nothing is generated (vLLM: one token is, then dropped). */
  echoWithoutGeneration: boolean;
  /** Number of top logprobs per token; null = no logprobs. */
  logprobs: number | null;
}

export interface ChatRequest extends GenerationFields {
  messages: ChatMessage[];
  /** Passed to the chat template; null when not sent. */
  tools: ToolDefinition[] | null;
  toolChoice: ToolChoice;
  addGenerationPrompt: boolean;
  /** vLLM's continue_final_message: the prompt ends inside the last message, for the model to go on with it. */
  continueFinalMessage: boolean;
  /** vLLM's add_special_tokens for chat (default false: the template brings its own). */
  addSpecialTokens: boolean;
  chatTemplate: string | null;
  chatTemplateKwargs: Record<string, unknown>;
  /** null = no logprobs; else the number of top alternatives (0..). */
  logprobs: number | null;
  /** vLLM's chat echo: the last message's content, when it is the assistant's, starts the answer's; else ''. */
  echoText: string;
}

function parseGenerationFields(b: Body, limits: ServerLimits): GenerationFields {
  const stream = optBool(b, 'stream') ?? false;
  const so = b.stream_options;
  let includeUsage = false;
  let continuousUsage = false;
  if (so !== undefined && so !== null) {
    if (!stream) throw badRequest('`stream_options` is only allowed when `stream` is true.', 'stream_options');
    if (typeof so !== 'object' || Array.isArray(so)) throw badRequest('`stream_options` must be an object.', 'stream_options');
    includeUsage = optBool(so as Body, 'include_usage') ?? false;
    continuousUsage = includeUsage && (optBool(so as Body, 'continuous_usage_stats') ?? false);
  }
  const cacheSalt = optString(b, 'cache_salt');
  if (cacheSalt === '') throw badRequest('`cache_salt` must not be empty.', 'cache_salt');
  return {
    model: optString(b, 'model'),
    maxTokens: optInt(b, 'max_completion_tokens', 1) ?? optInt(b, 'max_tokens', 1),
    n: optInt(b, 'n', 1, limits.maxN) ?? 1,
    stream,
    includeUsage,
    continuousUsage,
    returnTokenIds: optBool(b, 'return_token_ids') ?? false,
    priority: optInt(b, 'priority', Number.MIN_SAFE_INTEGER) ?? 0,
    cacheSalt,
    user: optString(b, 'user'),
    promptLogprobs: optInt(b, 'prompt_logprobs', 0, limits.maxLogprobs),
    truncatePromptTokens: truncateOf(b),
    returnTokensAsTokenIds: optBool(b, 'return_tokens_as_token_ids'),
  };
}

export function truncateOf(b: Body): number | null {
  const k = optInt(b, 'truncate_prompt_tokens', -1);
  if (k === 0) throw badRequest('`truncate_prompt_tokens` must be -1 (the context length) or at least 1, got 0.', 'truncate_prompt_tokens');
  return k;
}

/** A prompt field (`prompt`, or embeddings' `input`): a string, strings, token ids or lists of them. */
export function parsePrompts(v: unknown, limits: ServerLimits, param = 'prompt'): (string | number[])[] {
  if (v === undefined || v === null) throw badRequest(`\`${param}\` is required.`, param);
  let prompts: (string | number[])[];
  if (typeof v === 'string') prompts = [v];
  else if (Array.isArray(v) && v.length > 0 && v.every(isInt)) prompts = [v];
  else if (Array.isArray(v) && v.length > 0 && v.every((p) => typeof p === 'string')) prompts = v;
  else if (Array.isArray(v) && v.length > 0 && v.every((p) => Array.isArray(p) && p.every(isInt))) prompts = v;
  else if (Array.isArray(v) && v.length === 0) throw badRequest(`\`${param}\` must not be empty.`, param);
  else throw badRequest(`\`${param}\` must be a string, a list of strings, a list of token ids, or a list of lists of token ids.`, param);
  if (prompts.length > limits.maxPromptsPerRequest) {
    throw badRequest(`\`${param}\` has ${prompts.length} prompts; at most ${limits.maxPromptsPerRequest} are allowed.`, param);
  }
  if (prompts.some((p) => p.length === 0)) throw badRequest(`\`${param}\` must not be empty.`, param);
  return prompts;
}

export function parseCompletionRequest(body: unknown, limits: ServerLimits): CompletionRequest {
  const b = asObjectBody(body);
  const echo = optBool(b, 'echo') ?? false;
  // as vLLM: echo with max_tokens 0 scores the prompt (with logprobs) and generates nothing
  const echoWithoutGeneration = echo && b.max_tokens === 0 && b.max_completion_tokens === undefined;
  const common = parseGenerationFields(echoWithoutGeneration ? { ...b, max_tokens: 1 } : b, limits);
  const logprobs = optInt(b, 'logprobs', 0, limits.maxLogprobs);
  // fields that change the answer are refused rather than ignored (as vLLM V1)
  if (typeof b.suffix === 'string' && b.suffix !== '') throw badRequest('`suffix` is not supported.', 'suffix');
  const bestOf = optInt(b, 'best_of', 1);
  if (bestOf !== null && bestOf > 1) throw badRequest('`best_of` is not supported (as in vLLM V1); ask for `n` choices instead.', 'best_of');
  // an echoed prompt's logprobs are its prompt logprobs (vLLM)
  const promptLogprobs = common.promptLogprobs ?? (echo ? logprobs : null);
  return { ...common, promptLogprobs, prompts: parsePrompts(b.prompt, limits), echo, echoWithoutGeneration, logprobs };
}

function messageText(content: unknown, i: number): string {
  if (typeof content === 'string') return content;
  if (content === null || content === undefined) return '';
  if (Array.isArray(content)) {
    const texts: string[] = [];
    for (const part of content) {
      const p = part as Body | null;
      if (p === null || typeof p !== 'object' || p.type !== 'text' || typeof p.text !== 'string') {
        throw badRequest(`\`messages[${i}].content\` parts must be {"type": "text", "text": string}.`, `messages[${i}].content`);
      }
      texts.push(p.text);
    }
    return texts.join('\n');
  }
  throw badRequest(`\`messages[${i}].content\` must be a string or a list of content parts.`, `messages[${i}].content`);
}

function parseMessages(v: unknown): ChatMessage[] {
  if (!Array.isArray(v) || v.length === 0) throw badRequest('`messages` must be a non-empty list.', 'messages');
  return v.map((m: unknown, i) => {
    const msg = m as Body | null;
    if (msg === null || typeof msg !== 'object' || Array.isArray(msg) || typeof msg.role !== 'string') {
      throw badRequest(`\`messages[${i}]\` must be an object with a string \`role\`.`, `messages[${i}]`);
    }
    const out: ChatMessage = { role: msg.role, content: messageText(msg.content, i) };
    if (msg.tool_calls !== undefined && msg.tool_calls !== null) {
      out.tool_calls = parseMessageToolCalls(msg.tool_calls, `messages[${i}].tool_calls`);
    }
    for (const key of ['tool_call_id', 'name', 'reasoning_content'] as const) {
      const value = msg[key];
      if (value === undefined || value === null) continue;
      if (typeof value !== 'string') throw badRequest(`\`messages[${i}].${key}\` must be a string.`, `messages[${i}].${key}`);
      out[key] = value;
    }
    return out;
  });
}

/** add_generation_prompt (default true) and continue_final_message (which turns the default off), as vLLM. */
function generationPrompt(b: Body): { addGenerationPrompt: boolean; continueFinalMessage: boolean } {
  const add = optBool(b, 'add_generation_prompt');
  const cont = optBool(b, 'continue_final_message') ?? false;
  if (cont && add === true) {
    throw badRequest('Cannot set both `continue_final_message` and `add_generation_prompt` to true.', 'continue_final_message');
  }
  return { addGenerationPrompt: add ?? !cont, continueFinalMessage: cont };
}

export function parseChatRequest(body: unknown, limits: ServerLimits): ChatRequest {
  const b = asObjectBody(body);
  const common = parseGenerationFields(b, limits);
  const wantLogprobs = optBool(b, 'logprobs') ?? false;
  const top = optInt(b, 'top_logprobs', 0, limits.maxLogprobs);
  if (top !== null && top > 0 && !wantLogprobs) throw badRequest('`top_logprobs` requires `logprobs: true`.', 'top_logprobs');
  const kwargs = b.chat_template_kwargs;
  if (kwargs !== undefined && kwargs !== null && (typeof kwargs !== 'object' || Array.isArray(kwargs))) {
    throw badRequest('`chat_template_kwargs` must be an object.', 'chat_template_kwargs');
  }
  const tools = parseTools(b);
  const messages = parseMessages(b.messages);
  return {
    ...common,
    messages,
    tools,
    toolChoice: parseToolChoice(b, tools),
    ...generationPrompt(b),
    addSpecialTokens: optBool(b, 'add_special_tokens') ?? false,
    chatTemplate: optString(b, 'chat_template'),
    chatTemplateKwargs: (kwargs as Record<string, unknown> | undefined) ?? {},
    logprobs: wantLogprobs ? (top ?? 0) : null,
    echoText: echoTextOf(b, messages),
  };
}

/** vLLM's chat `echo`: the last message's content when it is the assistant's (the role that answers). */
function echoTextOf(b: Body, messages: ChatMessage[]): string {
  if (!(optBool(b, 'echo') ?? false)) return '';
  const last = messages.at(-1);
  return last?.role === 'assistant' ? last.content : '';
}
