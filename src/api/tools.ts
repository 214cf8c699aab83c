// Tool calling, request side (vLLM's behaviour): `tools` and `tool_choice` are
// checked here, the tools go to the chat template, and an assistant message's
// earlier `tool_calls` reach the template with their arguments as objects.
// Which output parser runs is the server's choice (`--enable-auto-tool-choice
// --tool-call-parser hermes`); see tool-parser.ts.

import { randomBytes } from 'node:crypto';
import { badRequest } from './errors.js';
import { isObject, type Body } from './schemas.js';
import type { ParsedToolCall } from './tool-parser.js';

/** One entry of `tools`, passed to the chat template as sent. */
export interface ToolDefinition {
  type: 'function';
  function: { name: string; description?: string; parameters?: Record<string, unknown> };
  [extra: string]: unknown;
}

/** `tool_choice`: a named function is `{ name }`. */
export type ToolChoice = 'none' | 'auto' | 'required' | { name: string };

/** The output parsers this server has (`--tool-call-parser`). */
export const TOOL_CALL_PARSERS = ['hermes', 'llama3_json', 'mistral'] as const;
export type ToolCallParserName = (typeof TOOL_CALL_PARSERS)[number];

/** `tools`: null when absent; a list of `{"type": "function", "function": {"name", ...}}`. */
export function parseTools(b: Body): ToolDefinition[] | null {
  const v = b.tools;
  if (v === undefined || v === null) return null;
  if (!Array.isArray(v)) throw badRequest('`tools` must be a list of tools.', 'tools');
  return v.map((t: unknown, i) => {
    const at = `tools[${i}]`;
    if (!isObject(t) || t.type !== 'function') throw badRequest(`\`${at}\` must be {"type": "function", "function": {...}}.`, at);
    const f = t.function;
    if (!isObject(f) || typeof f.name !== 'string' || f.name === '') {
      throw badRequest(`\`${at}.function.name\` must be a non-empty string.`, `${at}.function.name`);
    }
    if (f.description !== undefined && f.description !== null && typeof f.description !== 'string') {
      throw badRequest(`\`${at}.function.description\` must be a string.`, `${at}.function.description`);
    }
    if (f.parameters !== undefined && f.parameters !== null && !isObject(f.parameters)) {
      throw badRequest(`\`${at}.function.parameters\` must be a JSON Schema object.`, `${at}.function.parameters`);
    }
    return t as ToolDefinition;
  });
}

/** `tool_choice`: "auto" when tools are sent without one, else "none" (as OpenAI and vLLM). */
export function parseToolChoice(b: Body, tools: readonly ToolDefinition[] | null): ToolChoice {
  const v = b.tool_choice;
  const hasTools = tools !== null && tools.length > 0;
  if (v === undefined || v === null) return hasTools ? 'auto' : 'none';
  let choice: ToolChoice;
  if (v === 'none' || v === 'auto' || v === 'required') choice = v;
  else if (isObject(v) && v.type === 'function' && isObject(v.function) && typeof v.function.name === 'string') {
    choice = { name: v.function.name };
  } else {
    throw badRequest('`tool_choice` must be "none", "auto", "required" or {"type": "function", "function": {"name": ...}}.',
      'tool_choice');
  }
  if (choice === 'none') return choice;
  if (!hasTools) throw badRequest('`tool_choice` other than "none" requires `tools`.', 'tool_choice');
  if (typeof choice === 'object' && !tools!.some((t) => t.function.name === choice.name)) {
    throw badRequest(`\`tool_choice\` names the function "${choice.name}", which is not in \`tools\`.`, 'tool_choice');
  }
  return choice;
}

/**
 * How a request's output becomes tool calls: "none" leaves it text; "auto" parses what the model writes (and needs
 * the server's parser: vLLM's 400 otherwise); a named function or "required" constrain the output to the
 * function's arguments, or to a list of calls, by a grammar (forcedToolSpec), as vLLM does.
 */
export type ToolMode = { kind: 'none' } | { kind: 'auto' } | { kind: 'named'; name: string } | { kind: 'required' };

export function toolModeFor(choice: ToolChoice, parser: ToolCallParserName | null): ToolMode {
  if (choice === 'none') return { kind: 'none' };
  if (choice === 'auto') {
    if (parser === null) {
      throw badRequest('"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set.', 'tool_choice');
    }
    return { kind: 'auto' };
  }
  return choice === 'required' ? { kind: 'required' } : { kind: 'named', name: choice.name };
}

const parametersOf = (t: ToolDefinition) => t.function.parameters ?? { type: 'object' };

/** The JSON schema a forced tool choice puts on the output: the named function's arguments, or a list of calls. */
export function forcedToolSchema(mode: ToolMode, tools: readonly ToolDefinition[]): string | null {
  if (mode.kind === 'named') return JSON.stringify(parametersOf(tools.find((t) => t.function.name === mode.name)!));
  if (mode.kind !== 'required') return null;
  return JSON.stringify({
    type: 'array', minItems: 1,
    items: {
      anyOf: tools.map((t) => ({
        type: 'object', properties: { name: { type: 'string', enum: [t.function.name] }, parameters: parametersOf(t) },
        required: ['name', 'parameters'],
      })),
    },
  });
}

/** An assistant message's `tool_calls`, arguments parsed to objects (vLLM does the same for the templates). */
export function parseMessageToolCalls(v: unknown, at: string): Body[] {
  if (!Array.isArray(v)) throw badRequest(`\`${at}\` must be a list.`, at);
  return v.map((c: unknown, j) => {
    const here = `${at}[${j}]`;
    if (!isObject(c) || !isObject(c.function) || typeof c.function.name !== 'string') {
      throw badRequest(`\`${here}\` must be {"type": "function", "function": {"name", "arguments"}}.`, here);
    }
    let args: unknown = c.function.arguments ?? {};
    if (typeof args === 'string') {
      try {
        args = JSON.parse(args);
      } catch {
        args = undefined;
      }
    }
    if (!isObject(args)) {
      throw badRequest(`\`${here}.function.arguments\` must be a JSON object, or a string holding one.`, `${here}.function.arguments`);
    }
    return { ...c, type: 'function', function: { ...c.function, arguments: args } };
  });
}

/** An OpenAI tool call with a fresh id (vLLM's `chatcmpl-tool-` ids); `index` in stream deltas only. */
export function toolCallJson(c: ParsedToolCall, index?: number): Record<string, unknown> {
  return {
    ...(index !== undefined ? { index } : {}),
    id: c.id ?? `chatcmpl-tool-${randomBytes(16).toString('hex')}`, type: 'function',
    function: { name: c.name, arguments: c.arguments },
  };
}
