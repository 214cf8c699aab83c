// POST /v1/responses: OpenAI's Responses API, the stateless part vLLM serves too: `input` (a string, or messages
// whose content is a string or input_text parts), `instructions`, `max_output_tokens`, sampling fields, and
// `text.format` (structured outputs). Streamed as typed events (response.created ... response.completed).
// Stored responses (`previous_response_id`) and tools are refused with a 400.

import { randomUUID } from 'node:crypto';
import type { FastifyInstance } from 'fastify';
import { badRequest } from '../errors.js';
import type { ChoiceDelta, ChoiceOutcome } from '../generation.js';
import { choiceRequests, resolveMaxTokens } from '../prompt.js';
import { samplingFromBody } from '../sampling.js';
import { isObject, optInt, parseChatRequest, type Body } from '../schemas.js';
import { serveChoices, type ChoiceFormatter, type Usage } from '../serve.js';
import { structuredOutputFromBody } from '../structured.js';
import { chatPromptIds } from './chat.js';
import { resolveModel, type RouteDeps } from './deps.js';

/** `input` and `instructions` as chat messages. */
export function responseMessages(b: Body): { role: string; content: string }[] {
  const messages: { role: string; content: string }[] = [];
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
      if (!isObject(m) || typeof m.role !== 'string' || (m.type !== undefined && m.type !== 'message')) {
        throw badRequest(`\`${at}\` must be a message ({"role", "content"}); other input items are not supported.`, at);
      }
      const role = m.role === 'developer' ? 'system' : m.role;
      if (typeof m.content === 'string') return messages.push({ role, content: m.content });
      if (!Array.isArray(m.content)) throw badRequest(`\`${at}.content\` must be a string or a list of text parts.`, `${at}.content`);
      const texts = m.content.map((p: unknown, j) => {
        if (!isObject(p) || !['input_text', 'output_text', 'text'].includes(p.type as string) || typeof p.text !== 'string') {
          throw badRequest(`\`${at}.content[${j}]\` must be {"type": "input_text", "text": string}.`, `${at}.content[${j}]`);
        }
        return p.text;
      });
      messages.push({ role, content: texts.join('\n') });
    });
  } else {
    throw badRequest('`input` must be a string or a non-empty list of messages.', 'input');
  }
  return messages;
}

/** `text.format` in the shape `response_format` has (the Responses API flattens json_schema's fields). */
function responseFormatOf(b: Body): unknown {
  const text = b.text;
  if (text === undefined || text === null) return undefined;
  if (!isObject(text)) throw badRequest('`text` must be an object.', 'text');
  const f = text.format;
  if (f === undefined || f === null) return undefined;
  if (!isObject(f)) throw badRequest('`text.format` must be an object.', 'text.format');
  return f.type === 'json_schema' ? { type: 'json_schema', json_schema: { name: f.name, schema: f.schema, strict: f.strict } } : f;
}

export function registerResponses(app: FastifyInstance, d: RouteDeps): void {
  app.post('/v1/responses', async (request, reply) => {
    const arrivalTime = Date.now();
    const b = request.body as Body;
    if (!isObject(b)) throw badRequest('Request body must be a JSON object.', null, 'invalid_json');
    for (const k of ['previous_response_id', 'conversation']) {
      if (b[k] !== undefined && b[k] !== null) throw badRequest(`\`${k}\` needs stored responses, which this server does not keep.`, k);
    }
    if (Array.isArray(b.tools) && b.tools.length > 0) throw badRequest('`tools` are not supported on /v1/responses; use /v1/chat/completions.', 'tools');
    const maxOutput = optInt(b, 'max_output_tokens', 1);
    const r = parseChatRequest({ messages: responseMessages(b), stream: b.stream ?? false, model: b.model, user: b.user }, d.limits);
    const model = resolveModel(d, r.model);
    const base = samplingFromBody({ temperature: b.temperature, top_p: b.top_p, seed: b.seed, top_k: b.top_k }, {
      vocabSize: d.tokenizer.vocabSize, limits: d.limits, logprobs: null, maxTokens: maxOutput ?? d.maxModelLen,
    });
    const format = responseFormatOf(b);
    base.structuredOutput = await structuredOutputFromBody(format === undefined ? {} : { response_format: format });
    const ids = chatPromptIds(d, r);
    const maxTokens = resolveMaxTokens(ids.length, maxOutput, d.maxModelLen, 'input');
    const id = `resp_${randomUUID().replaceAll('-', '')}`;
    const reqs = choiceRequests(id, 0, ids, { ...base, maxTokens }, { ...r, n: 1 }, arrivalTime);
    const fmt = responsesFormatter({
      id, model, createdAt: Math.floor(arrivalTime / 1000), instructions: typeof b.instructions === 'string' ? b.instructions : null,
      maxOutputTokens: maxOutput, temperature: base.temperature, topP: base.topP,
      text: { format: format ?? { type: 'text' } }, metadata: isObject(b.metadata) ? b.metadata : {},
    });
    return serveChoices(request, reply, {
      ctx: d.ctx, inflight: d.inflight, reqs, promptLengths: [ids.length], n: 1,
      stream: r.stream, includeUsage: true, continuousUsage: false, fmt, events: true,
    });
  });
}

interface ResponseHead {
  id: string;
  model: string;
  createdAt: number;
  instructions: string | null;
  maxOutputTokens: number | null;
  temperature: number;
  topP: number;
  text: unknown;
  metadata: Body;
}

/** The Responses shapes over one choice: a message item with one output_text part. */
function responsesFormatter(h: ResponseHead): ChoiceFormatter {
  const itemId = `msg_${randomUUID().replaceAll('-', '')}`;
  let seq = 0;
  let text = '';
  let outcome: ChoiceOutcome | null = null;
  const event = (type: string, fields: Body) => ({ type, sequence_number: seq++, ...fields });
  const part = (t: string) => ({ type: 'output_text', text: t, annotations: [] });
  const item = (status: string, content: unknown[]) => ({ type: 'message', id: itemId, status, role: 'assistant', content });
  const response = (status: string, output: unknown[], usage: Usage | null, o: ChoiceOutcome | null) => ({
    id: h.id, object: 'response', created_at: h.createdAt, status, model: h.model, output,
    ...(usage ? {
      usage: {
        input_tokens: usage.prompt_tokens, input_tokens_details: { cached_tokens: usage.prompt_tokens_details.cached_tokens },
        output_tokens: usage.completion_tokens, output_tokens_details: { reasoning_tokens: 0 }, total_tokens: usage.total_tokens,
      },
    } : { usage: null }),
    incomplete_details: o?.finishReason === 'length' ? { reason: 'max_output_tokens' } : null,
    error: null, instructions: h.instructions, max_output_tokens: h.maxOutputTokens, temperature: h.temperature, top_p: h.topP,
    text: h.text, tools: [], tool_choice: 'auto', parallel_tool_calls: true, previous_response_id: null, metadata: h.metadata,
  });
  const statusOf = (o: ChoiceOutcome) => (o.finishReason === 'length' ? 'incomplete' : 'completed');
  const at = { item_id: itemId, output_index: 0, content_index: 0 };
  return {
    openingChunks() {
      return [
        event('response.created', { response: response('in_progress', [], null, null) }),
        event('response.in_progress', { response: response('in_progress', [], null, null) }),
        event('response.output_item.added', { output_index: 0, item: item('in_progress', []) }),
        event('response.content_part.added', { ...at, part: part('') }),
      ];
    },
    deltaChunk(dl: ChoiceDelta) {
      if (dl.text === '') return null;
      text += dl.text;
      return event('response.output_text.delta', { ...at, delta: dl.text, logprobs: [] });
    },
    finishChunks(o: ChoiceOutcome) {
      outcome = o;
      return [
        event('response.output_text.done', { ...at, text, logprobs: [] }),
        event('response.content_part.done', { ...at, part: part(text) }),
        event('response.output_item.done', { output_index: 0, item: item(statusOf(o), [part(text)]) }),
      ];
    },
    usageChunk(usage: Usage) {
      const status = outcome ? statusOf(outcome) : 'completed';
      return event(status === 'incomplete' ? 'response.incomplete' : 'response.completed', {
        response: response(status, [item(status, [part(text)])], usage, outcome),
      });
    },
    response(outcomes: ChoiceOutcome[], usage: Usage) {
      const o = outcomes[0]!;
      return response(statusOf(o), [item(statusOf(o), [part(o.text)])], usage, o);
    },
  };
}
