import { existsSync, readFileSync } from 'node:fs';
import { Template } from '@huggingface/jinja';
import { describeError } from './errors.js';
import type { ChatMessage } from './types.js';

/** A chat template that fails to parse, or refuses these messages (raise_exception): a client error. */
export class ChatTemplateError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'ChatTemplateError';
  }
}

export interface RenderChatOptions {
  addGenerationPrompt?: boolean;
  bosToken?: string | null;
  eosToken?: string | null;
  /** Further template variables (tools, enable_thinking, ...). */
  [extra: string]: unknown;
}

const compiled = new Map<string, Template>();
const MAX_COMPILED = 16;

function compile(source: string): Template {
  let template = compiled.get(source);
  if (template === undefined) {
    try {
      template = new Template(source);
    } catch (err) {
      throw new ChatTemplateError(`chat template does not parse: ${describeError(err)}`, { cause: err });
    }
    if (compiled.size >= MAX_COMPILED) compiled.delete(compiled.keys().next().value!);
    compiled.set(source, template);
  }
  return template;
}

/** Renders messages with a Hugging Face (Jinja) chat template. */
export function renderChat(template: string, messages: readonly ChatMessage[], opts: RenderChatOptions = {}): string {
  const { addGenerationPrompt, bosToken, eosToken, ...extra } = opts;
  const variables: Record<string, unknown> = {
    ...extra,
    messages: messages.map((m) => ({ ...m })),
    add_generation_prompt: addGenerationPrompt ?? false,
    bos_token: bosToken ?? '',
    eos_token: eosToken ?? '',
  };
  try {
    return compile(template).render(variables);
  } catch (err) {
    if (err instanceof ChatTemplateError) throw err;
    throw new ChatTemplateError(`chat template failed: ${describeError(err)}`, { cause: err });
  }
}

/** tokenizer_config.chat_template: a string, or a list of { name, template } (the "default" one is used). */
export function chatTemplateFromConfig(raw: unknown): string | null {
  if (typeof raw === 'string') return raw;
  if (Array.isArray(raw)) {
    const named = raw.filter(
      (t): t is { name: string; template: string } => typeof t === 'object' && t !== null && typeof t.template === 'string',
    );
    return (named.find((t) => t.name === 'default') ?? named[0])?.template ?? null;
  }
  return null;
}

/**
 * vLLM's --chat-template: a file's path, or the template itself (any text with `{`, `}` or a newline); parsed
 * here, so a broken template stops the server at start-up, not at the first request.
 */
export function loadChatTemplateArg(arg: string): string {
  let text: string;
  if (existsSync(arg)) {
    try {
      text = readFileSync(arg, 'utf8');
    } catch (err) {
      throw new ChatTemplateError(`--chat-template ${arg}: cannot be read: ${describeError(err)}`, { cause: err });
    }
  } else if (/[{}\n]/.test(arg)) {
    text = arg;
  } else {
    throw new ChatTemplateError(`--chat-template ${arg}: looks like a file path, but there is no such file`);
  }
  try {
    compile(text);
  } catch (err) {
    throw new ChatTemplateError(`--chat-template ${existsSync(arg) ? arg : '(inline)'}: ${(err as Error).message}`, { cause: err });
  }
  return text;
}
