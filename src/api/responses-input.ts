// The Responses API's request side in chat terms (what /v1/responses hands the chat template and the tool
// machinery of /v1/chat/completions, as vLLM does): `instructions` and `input` as messages (message items, and
// the function_call / function_call_output items of a tool round trip as an assistant turn's tool_calls and tool
// turns), and the flat function `tools` and `tool_choice` in the chat shapes.

import { badRequest } from './errors.js';
import { isObject, type Body } from './schemas.js';

/** `input` and `instructions` as chat messages (the body of parseChatRequest's `messages`). */
export function responseMessages(b: Body): Body[] {
  const messages: Body[] = [];
  if (b.instructions !== undefined && b.instructions !== null) {
    if (typeof b.instructions !== 'string') throw badRequest('`instructions` must be a string.', 'instructions');
    messages.push({ role: 'system', content: b.instructions });
  }
  const input = b.input;
  if (typeof input === 'string') {
    if (input === '') throw badRequest('`input` must not be empty.', 'input');
    messages.push({ role: 'user', content: input });
  } else if (Array.isArray(input) && input.length > 0) {
    input.forEach((m: unknown, i) => {
      const at = `input[${i}]`;
      if (isObject(m) && m.type === 'function_call') return pushCall(messages, m, at);
      if (isObject(m) && m.type === 'function_call_output') {
        if (typeof m.call_id !== 'string' || typeof m.output !== 'string') {
          throw badRequest(`\`${at}\` must be {"type": "function_call_output", "call_id": string, "output": string}.`, at);
        }
        return messages.push({ role: 'tool', tool_call_id: m.call_id, content: m.output });
      }
      if (!isObject(m) || typeof m.role !== 'string' || (m.type !== undefined && m.type !== 'message')) {
        throw badRequest(`\`${at}\` must be a message ({"role", "content"}), a function_call or a function_call_output; `
          + 'other input items are not supported.', at);
      }
      messages.push({ role: m.role === 'developer' ? 'system' : m.role, content: messageText(m.content, at) });
    });
  } else {
    throw badRequest('`input` must be a string or a non-empty list of items.', 'input');
  }
  return messages;
}

function messageText(content: unknown, at: string): string {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) throw badRequest(`\`${at}.content\` must be a string or a list of text parts.`, `${at}.content`);
  return content.map((p: unknown, j) => {
    if (!isObject(p) || !['input_text', 'output_text', 'text'].includes(p.type as string) || typeof p.text !== 'string') {
      throw badRequest(`\`${at}.content[${j}]\` must be {"type": "input_text", "text": string}.`, `${at}.content[${j}]`);
    }
    return p.text;
  }).join('\n');
}

/** A function_call item: a call of the assistant turn before it when that turn is only calls, else a new turn. */
function pushCall(messages: Body[], m: Body, at: string): void {
  if (typeof m.call_id !== 'string' || typeof m.name !== 'string' || typeof m.arguments !== 'string') {
    throw badRequest(`\`${at}\` must be {"type": "function_call", "call_id": string, "name": string, "arguments": string}.`, at);
  }
  const call = { id: m.call_id, type: 'function', function: { name: m.name, arguments: m.arguments } };
  const last = messages.at(-1);
  if (last?.role === 'assistant' && Array.isArray(last.tool_calls)) (last.tool_calls as unknown[]).push(call);
  else messages.push({ role: 'assistant', content: '', tool_calls: [call] });
}

/** `tools` ({"type": "function", "name", "description", "parameters"}) in the chat shape; null when absent. */
export function responseTools(b: Body): Body[] | null {
  const v = b.tools;
  if (v === undefined || v === null) return null;
  if (!Array.isArray(v)) throw badRequest('`tools` must be a list of tools.', 'tools');
  return v.map((t: unknown, i) => {
    const at = `tools[${i}]`;
    if (!isObject(t) || t.type !== 'function') {
      throw badRequest(`\`${at}\` must be {"type": "function", "name": ...}: only function tools are supported.`, at);
    }
    if (typeof t.name !== 'string' || t.name === '') throw badRequest(`\`${at}.name\` must be a non-empty string.`, `${at}.name`);
    if (t.description !== undefined && t.description !== null && typeof t.description !== 'string') {
      throw badRequest(`\`${at}.description\` must be a string.`, `${at}.description`);
    }
    if (t.parameters !== undefined && t.parameters !== null && !isObject(t.parameters)) {
      throw badRequest(`\`${at}.parameters\` must be a JSON Schema object.`, `${at}.parameters`);
    }
    const fn: Body = { name: t.name };
    if (typeof t.description === 'string') fn.description = t.description;
    if (isObject(t.parameters)) fn.parameters = t.parameters;
    return { type: 'function', function: fn };
  });
}

/** `tool_choice` ("none", "auto", "required" or {"type": "function", "name"}) in the chat shape. */
export function responseToolChoice(b: Body): unknown {
  const v = b.tool_choice;
  if (isObject(v) && v.type === 'function' && typeof v.name === 'string') return { type: 'function', function: { name: v.name } };
  return v;
}
