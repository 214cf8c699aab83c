// POST /v1/responses: OpenAI's Responses API, the stateless part vLLM serves too: `input` (a string, or message,
// function_call and function_call_output items), `instructions`, `max_output_tokens`, sampling fields, `text.format`
// (structured outputs), `top_logprobs` with include ["message.output_text.logprobs"], and function `tools` with
// `tool_choice` (through the chat route's machinery: the template gets the tools, --tool-call-parser reads "auto"
// calls, a grammar forces "required" and named ones). Output items and stream events: responses-output.ts. Stored
// responses (`previous_response_id`) are refused with a 400.

import type { FastifyInstance } from 'fastify';
import { badRequest } from '../errors.js';
import { chatLogprobs } from '../logprobs.js';
import { checkFitsKvCache, choiceRequests, resolveMaxTokens } from '../prompt.js';
import { responseMessages, responseToolChoice, responseTools } from '../responses-input.js';
import { newId, responsesFormatter } from '../responses-output.js';
import { samplingFromBody } from '../sampling.js';
import { isObject, optInt, parseChatRequest, type Body } from '../schemas.js';
import { serveChoices } from '../serve.js';
import { structuredOutputFromBody } from '../structured.js';
import { prepareChat } from './chat.js';
import { resolveModel, type RouteDeps } from './deps.js';

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

/** The output parts that `include` may ask for (OpenAI's list); only the text's logprobs change what is computed. */
const INCLUDABLE = ['message.output_text.logprobs', 'reasoning.encrypted_content', 'message.input_image.image_url',
  'file_search_call.results', 'web_search_call.action.sources', 'computer_call_output.output.image_url',
  'code_interpreter_call.outputs'];

function includesOutputLogprobs(b: Body): boolean {
  const inc = b.include;
  if (inc === undefined || inc === null) return false;
  if (!Array.isArray(inc) || inc.some((x) => typeof x !== 'string' || !INCLUDABLE.includes(x))) {
    throw badRequest(`\`include\` must be a list of: ${INCLUDABLE.join(', ')}.`, 'include');
  }
  return inc.includes('message.output_text.logprobs');
}

/** Chat and completions fields a Responses client may send by mistake; each would change the answer. */
const UNSUPPORTED_FIELDS = ['logit_bias', 'stop_token_ids', 'n', 'stream_options', 'stop', 'bad_words', 'allowed_token_ids',
  'max_tokens', 'max_completion_tokens', 'response_format', 'structured_outputs'];

export function registerResponses(app: FastifyInstance, d: RouteDeps): void {
  app.post('/v1/responses', async (request, reply) => {
    const arrivalTime = Date.now();
    const b = request.body as Body;
    if (!isObject(b)) throw badRequest('Request body must be a JSON object.', null, 'invalid_json');
    for (const k of ['previous_response_id', 'conversation']) {
      if (b[k] !== undefined && b[k] !== null) throw badRequest(`\`${k}\` needs stored responses, which this server does not keep.`, k);
    }
    // fields of the other APIs that would change the answer are refused, not silently dropped
    for (const k of UNSUPPORTED_FIELDS) {
      if (b[k] !== undefined && b[k] !== null) {
        throw badRequest(`\`${k}\` is not a field of the Responses API; use /v1/chat/completions for it.`, k);
      }
    }
    const maxOutput = optInt(b, 'max_output_tokens', 1);
    const topLogprobs = optInt(b, 'top_logprobs', 0, d.limits.maxLogprobs);
    const logprobs = includesOutputLogprobs(b) ? topLogprobs ?? 0 : null;
    const r = parseChatRequest({ messages: responseMessages(b), tools: responseTools(b), tool_choice: responseToolChoice(b),
      stream: b.stream ?? false, model: b.model, user: b.user }, d.limits);
    const model = resolveModel(d, r.model);
    const base = samplingFromBody({ temperature: b.temperature, top_p: b.top_p, seed: b.seed, top_k: b.top_k }, {
      vocabSize: d.tokenizer.vocabSize, limits: d.limits, logprobs, promptLogprobs: null, maxTokens: maxOutput ?? d.maxModelLen,
      defaults: d.samplingDefaults,
    });
    const format = responseFormatOf(b);
    const { ids, toolMode, parse } = await prepareChat(d, r, base,
      await structuredOutputFromBody(format === undefined ? {} : { response_format: format }, d.grammar), '`text.format`');
    const maxTokens = resolveMaxTokens(ids.length, maxOutput, d.maxModelLen, 'input');
    checkFitsKvCache(d.kvCacheTokens, ids.length, maxTokens, 'input');
    const id = newId('resp');
    const reqs = choiceRequests(id, 0, ids, { ...base, maxTokens }, { ...r, n: 1 }, arrivalTime);
    const fmt = responsesFormatter({
      id, model, createdAt: Math.floor(arrivalTime / 1000),
      echo: {
        instructions: typeof b.instructions === 'string' ? b.instructions : null, max_output_tokens: maxOutput,
        temperature: base.temperature, top_p: base.topP, text: { format: format ?? { type: 'text' } },
        tools: Array.isArray(b.tools) ? b.tools : [], tool_choice: b.tool_choice ?? (r.tools?.length ? 'auto' : 'none'),
        parallel_tool_calls: b.parallel_tool_calls ?? true, metadata: isObject(b.metadata) ? b.metadata : {},
        top_logprobs: topLogprobs ?? 0,
      },
    }, {
      parse, forced: toolMode.kind === 'named' || toolMode.kind === 'required' ? toolMode : null,
      logprobs: logprobs === null ? null : (lps) => chatLogprobs(d.tokenizer, lps, logprobs).content,
    });
    return serveChoices(request, reply, {
      ctx: d.ctx, inflight: d.inflight, reqs, promptLengths: [ids.length], n: 1,
      stream: r.stream, includeUsage: true, continuousUsage: false, fmt, events: true,
    });
  });
}
