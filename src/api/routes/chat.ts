// POST /v1/chat/completions

import type { FastifyInstance } from 'fastify';
import { ChatTemplateError, renderChat, type RenderChatOptions } from '../../loader/chat-template.js';
import { ChatOutputStream, parseChatOutput, type ChatOutputOptions } from '../chat-output.js';
import { ApiError, badRequest, unavailable } from '../errors.js';
import type { ChoiceDelta, ChoiceOutcome } from '../generation.js';
import { chatLogprobs, promptLogprobsJson } from '../logprobs.js';
import { checkFitsKvCache, choiceRequests, newResponseId, resolveMaxTokens, truncatePrompt } from '../prompt.js';
import { PoolClosedError, PoolTimeoutError } from '../worker-pool.js';
import { promptOpensThinking, reasoningEndToken } from '../reasoning.js';
import type { SamplingParams } from '../../sampling/params.js';
import type { StructuredOutputSpec } from '../../sampling/structured-output.js';
import { samplingFromBody } from '../sampling.js';
import { checkedSpec, structuredOutputFromBody } from '../structured.js';
import { parseChatRequest, type Body, type ChatRequest } from '../schemas.js';
import { serveChoices, type ChoiceFormatter, type Usage } from '../serve.js';
import type { ParsedToolCall } from '../tool-parser.js';
import { forcedToolSchema, toolCallJson, toolModeFor, type ToolMode } from '../tools.js';
import { forcedToolFormatter } from './chat-forced.js';
import { chatResponse, chunkHeadOf, openingChunks, usageChunk, type Header } from './chat-shapes.js';
import { resolveModel, type RouteDeps } from './deps.js';

/** Renders and tokenizes the conversation (the template brings its own BOS). */
export async function chatPromptIds(d: RouteDeps, r: ChatRequest): Promise<number[]> {
  return (await renderChatPrompt(d, r)).ids;
}

/**
 * A template the request sent (with --trust-request-chat-template) renders in the worker pool under
 * --chat-template-render-timeout: a template of nested loops must not hold the event loop. The server's own renders here.
 */
async function renderTemplate(d: RouteDeps, r: ChatRequest, template: string, options: RenderChatOptions): Promise<string> {
  if (r.chatTemplate === null) {
    try {
      return renderChat(template, r.messages, options);
    } catch (e) {
      if (e instanceof ChatTemplateError) throw badRequest(e.message, 'messages');
      throw e;
    }
  }
  const limitMs = d.limits.chatTemplateRenderTimeoutMs;
  let result;
  try {
    result = await d.pool.run({ kind: 'template', template, messages: r.messages, options }, limitMs);
  } catch (e) {
    if (e instanceof PoolTimeoutError) {
      throw badRequest(`\`chat_template\` did not render within the limit of ${limitMs / 1000} s `
        + '(--chat-template-render-timeout).', 'chat_template', 'chat_template_timeout');
    }
    if (e instanceof PoolClosedError) throw unavailable('The server is shutting down.');
    throw new ApiError(500, 'Rendering the chat template failed (its worker was replaced).', 'server_error');
  }
  if (result.ok) return result.text ?? '';
  if (result.reason !== null) throw badRequest(result.reason, 'chat_template');
  throw new ApiError(500, 'Rendering the chat template failed (its worker was replaced).', 'server_error');
}

async function renderChatPrompt(d: RouteDeps, r: ChatRequest): Promise<{ text: string; ids: number[] }> {
  if (r.chatTemplate !== null && !d.allowRequestChatTemplate) {
    throw badRequest('`chat_template` in the request is not allowed on this server.', 'chat_template');
  }
  const template = r.chatTemplate ?? d.chatTemplate;
  if (template === null) throw badRequest('This model has no chat template; use /v1/completions or send `chat_template`.', 'messages');
  const tok = d.tokenizer;
  const tokenString = (id: number | undefined | null) => (id === null || id === undefined ? null : (tok.idToToken(id) ?? null));
  let text = await renderTemplate(d, r, template, {
    ...r.chatTemplateKwargs,
    ...(r.tools !== null ? { tools: r.tools } : {}),
    addGenerationPrompt: r.addGenerationPrompt,
    bosToken: d.bosToken ?? tokenString(tok.bosTokenId),
    eosToken: d.eosToken ?? tokenString(tok.eosTokenIds[0]),
  });
  if (r.continueFinalMessage) text = endAtFinalMessage(text, r.messages.at(-1)!.content);
  const ids = tok.encode(text, { addSpecialTokens: r.addSpecialTokens });
  if (ids.length === 0) throw badRequest('The rendered conversation is empty.', 'messages');
  return { text, ids };
}

/**
 * continue_final_message (transformers' rule): the rendered text is cut right after the last message's content,
 * so the template's end of turn is gone and the model continues that message.
 */
export function endAtFinalMessage(text: string, final: string): string {
  if (final.trim() === '') throw badRequest('`continue_final_message` needs a final message with content.', 'messages');
  for (const piece of [final, final.trim()]) {
    const at = text.lastIndexOf(piece);
    if (at >= 0) return text.slice(0, at + piece.length);
  }
  throw badRequest('`continue_final_message` is set, but the final message does not appear in the rendered chat.', 'messages');
}

/** What the chat-shaped routes (chat, responses) settle before generating. */
export interface PreparedChat {
  ids: number[];
  toolMode: ToolMode;
  /** How the output is read: reasoning, and tool calls under "auto" (a forced choice's grammar makes the call). */
  parse: ChatOutputOptions;
}

/**
 * A chat-shaped request's tools, structured output and rendered prompt, as vLLM: "auto" needs the server's parser,
 * which must see the call tags (special tokens, maybe); a forced tool choice's grammar is the output's, and cannot
 * join `format` (named in the 400 by `formatName`); under a reasoning parser `format` holds from the end of the
 * thinking. Sets `base.skipSpecialTokens` and `base.structuredOutput`.
 */
export async function prepareChat(d: RouteDeps, r: ChatRequest, base: SamplingParams, format: StructuredOutputSpec | null,
  formatName: string): Promise<PreparedChat> {
  const toolMode = toolModeFor(r.toolChoice, d.autoToolParser);
  const parseTools = toolMode.kind === 'auto' ? d.autoToolParser : null;
  if (parseTools !== null) base.skipSpecialTokens = false;
  base.structuredOutput = format;
  const forced = forcedToolSchema(toolMode, r.tools ?? []);
  if (forced !== null) {
    if (format !== null) {
      throw badRequest(`A forced \`tool_choice\` ("required" or a named function) cannot be combined with ${formatName}.`, 'tool_choice');
    }
    base.structuredOutput = await checkedSpec({ type: 'json', schema: forced }, 'tools', d.grammar);
  }
  const { text, ids } = await renderChatPrompt(d, r);
  if (format !== null && d.reasoningParser !== null) {
    const after = reasoningEndToken(d.tokenizer, text);
    if (after !== undefined) base.structuredOutput = { ...format, afterTokenId: after };
  }
  const reasoning = d.reasoningParser !== null;
  return { ids, toolMode, parse: { reasoning, startsInReasoning: reasoning && promptOpensThinking(text), tools: parseTools } };
}

export function registerChat(app: FastifyInstance, d: RouteDeps): void {
  app.post('/v1/chat/completions', async (request, reply) => {
    const arrivalTime = Date.now();
    const r = parseChatRequest(request.body, d.limits);
    const model = resolveModel(d, r.model);
    const base = samplingFromBody(request.body as Body, {
      vocabSize: d.tokenizer.vocabSize, limits: d.limits, logprobs: r.logprobs, promptLogprobs: r.promptLogprobs,
      maxTokens: r.maxTokens ?? d.maxModelLen, tokenizer: d.tokenizer, defaults: d.samplingDefaults,
    });
    const prepared = await prepareChat(d, r, base, await structuredOutputFromBody(request.body as Body, d.grammar),
      'another structured output');
    const { toolMode, parse } = prepared;
    const ids = truncatePrompt(prepared.ids, r.truncatePromptTokens, d.maxModelLen);
    const maxTokens = resolveMaxTokens(ids.length, r.maxTokens, d.maxModelLen, 'messages');
    checkFitsKvCache(d.kvCacheTokens, ids.length, maxTokens, 'messages');
    const id = newResponseId('chatcmpl');
    const reqs = choiceRequests(id, 0, ids, { ...base, maxTokens }, r, arrivalTime);
    const header = { id, model, created: Math.floor(arrivalTime / 1000) };
    const fmt = withPromptLogprobs(d, r, toolMode.kind === 'named' || toolMode.kind === 'required'
      ? forcedToolFormatter(r, ids, header, toolMode, (o) => logprobsOf(d, r, o))
      : chatFormatter(d, r, ids, header, parse));
    return serveChoices(request, reply, {
      ctx: d.ctx, inflight: d.inflight, reqs, promptLengths: [ids.length], n: r.n,
      stream: r.stream, includeUsage: r.includeUsage, continuousUsage: r.continuousUsage, fmt,
    });
  });
}

/** vLLM's `prompt_logprobs` beside the choices of a non-streamed answer, when asked for. */
function withPromptLogprobs(d: RouteDeps, r: ChatRequest, fmt: ChoiceFormatter): ChoiceFormatter {
  if (r.promptLogprobs === null) return fmt;
  return {
    ...fmt,
    response: (outcomes, usage) => ({
      ...(fmt.response(outcomes, usage) as object),
      prompt_logprobs: promptLogprobsJson(d.tokenizer, outcomes[0]?.promptLogprobs ?? []),
    }),
  };
}

const logprobsOf = (d: RouteDeps, r: ChatRequest, o: { logprobs: ChoiceDelta['logprobs'] }) =>
  r.logprobs === null ? null : chatLogprobs(d.tokenizer, o.logprobs, r.logprobs,
  r.returnTokensAsTokenIds ?? d.returnTokensAsTokenIds);

function chatFormatter(d: RouteDeps, r: ChatRequest, promptIds: number[], h: Header, parse: ChatOutputOptions): ChoiceFormatter {
  const chunkHead = chunkHeadOf(h);
  const lp = (o: { logprobs: ChoiceDelta['logprobs'] }) => logprobsOf(d, r, o);
  const streams = new Map<number, ChatOutputStream>();
  const streamOf = (index: number) => {
    let p = streams.get(index);
    if (p === undefined) streams.set(index, (p = new ChatOutputStream(parse)));
    return p;
  };
  /** A stream delta; `content` stays when nothing else is there (an empty delta still carries it). */
  const deltaOf = (reasoning: string, content: string, calls: ParsedToolCall[], firstCall: number): Record<string, unknown> => ({
    ...(reasoning !== '' ? { reasoning_content: reasoning } : {}),
    ...(content !== '' || (reasoning === '' && calls.length === 0) ? { content } : {}),
    ...(calls.length > 0 ? { tool_calls: calls.map((c, k) => toolCallJson(c, firstCall + k)) } : {}),
  });
  return {
    openingChunks: () => openingChunks(r, promptIds, h),
    deltaChunk(delta: ChoiceDelta) {
      const o = streamOf(delta.index).push(delta.text);
      if (o.reasoning === '' && o.content === '' && o.calls.length === 0 && r.logprobs === null && !r.returnTokenIds) return null;
      return {
        ...chunkHead,
        choices: [{
          index: delta.index, delta: deltaOf(o.reasoning, o.content, o.calls, o.firstCall), logprobs: lp(delta), finish_reason: null,
          ...(r.returnTokenIds ? { token_ids: delta.tokenIds } : {}),
        }],
      };
    },
    finishChunks(outcome: ChoiceOutcome) {
      const chunks: unknown[] = [];
      const p = streamOf(outcome.index);
      const o = p.finish();
      if (o.reasoning !== '' || o.content !== '' || o.calls.length > 0) {
        chunks.push({ ...chunkHead, choices: [{ index: outcome.index, delta: deltaOf(o.reasoning, o.content, o.calls, o.firstCall), logprobs: null, finish_reason: null }] });
      }
      const finishReason = p.callCount > 0 ? 'tool_calls' : outcome.finishReason;
      chunks.push({ ...chunkHead, choices: [{ index: outcome.index, delta: {}, logprobs: null, finish_reason: finishReason, stop_reason: outcome.stopReason }] });
      return chunks;
    },
    usageChunk: (usage: Usage) => usageChunk(h, usage),
    response(outcomes: ChoiceOutcome[], usage: Usage) {
      return chatResponse(r, promptIds, h, outcomes, usage, (o) => {
        const e = parseChatOutput(o.text, parse);
        return {
          message: {
            content: r.echoText !== '' ? r.echoText + (e.content ?? '') : e.content,
            ...(parse.reasoning ? { reasoning_content: e.reasoning } : {}),
            ...(e.calls.length > 0 ? { tool_calls: e.calls.map((c) => toolCallJson(c)) } : {}),
          },
          finishReason: e.calls.length > 0 ? 'tool_calls' : o.finishReason,
        };
      }, lp);
    },
  };
}
