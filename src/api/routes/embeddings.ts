// POST /v1/embeddings (a pooling runner: `quire serve --runner pooling`, vLLM's `--task embed`): each input (or the
// chat form's `messages`, rendered by the chat template) is prefilled and its last token's final hidden state,
// normalized as the model's pooler says, comes back. Inputs of one request run side by side in the engine's batches;
// a client that disconnects aborts them (pages freed).

import { randomUUID } from 'node:crypto';
import type { FastifyInstance } from 'fastify';
import type { EngineRequest } from '../../engine/types.js';
import { defaultSamplingParams } from '../../sampling/params.js';
import { ApiError, badRequest } from '../errors.js';
import { checkTokenIds, truncatePrompt } from '../prompt.js';
import { asObjectBody, optBool, optInt, optString, parseChatRequest, parsePrompts, truncateOf } from '../schemas.js';
import { chatPromptIds } from './chat.js';
import { resolveModel, type RouteDeps } from './deps.js';

export function registerEmbeddings(app: FastifyInstance, d: RouteDeps): void {
  app.post('/v1/embeddings', async (request, reply) => {
    const arrivalTime = Date.now();
    if (d.pooler === null) {
      throw badRequest('The model does not support the Embeddings API: serve it with --runner pooling (or --task embed).');
    }
    const pooler = d.pooler;
    const b = asObjectBody(request.body);
    const model = resolveModel(d, optString(b, 'model'));
    // vLLM's chat form: `messages` through the chat template (no generation prompt unless asked), instead of `input`
    if (b.messages !== undefined && b.input !== undefined) throw badRequest('Send `input` or `messages`, not both.', 'messages');
    const inputs = b.messages !== undefined
      ? [await chatPromptIds(d, { ...parseChatRequest(b, d.limits), addGenerationPrompt: optBool(b, 'add_generation_prompt') ?? false })]
      : parsePrompts(b.input, d.limits, 'input');
    const format = optString(b, 'encoding_format') ?? 'float';
    if (format !== 'float' && format !== 'base64') {
      throw badRequest(`\`encoding_format\` must be "float" or "base64", got ${JSON.stringify(format)}.`, 'encoding_format');
    }
    const dimensions = optInt(b, 'dimensions', 1);
    if (dimensions !== null) {
      const allowed = pooler.matryoshkaDimensions;
      if (allowed !== null && !allowed.includes(dimensions)) {
        throw badRequest(allowed.length === 0
          ? `Model "${model}" does not support matryoshka representation, changing output dimensions will lead to poor results.`
          : `Model "${model}" only supports ${JSON.stringify(allowed)} matryoshka dimensions, using other output dimensions will lead to poor results.`,
        'dimensions');
      }
      if (dimensions > (d.hiddenSize ?? Infinity)) {
        throw badRequest(`\`dimensions\` (${dimensions}) is larger than the model's embedding size (${d.hiddenSize}).`, 'dimensions');
      }
    }
    const addSpecialTokens = optBool(b, 'add_special_tokens') ?? true;  // (the chat form's ids are rendered already)
    const truncate = truncateOf(b);
    const tok = d.tokenizer;
    const prompts = inputs.map((p) => {
      if (typeof p !== 'string') checkTokenIds(p, tok.vocabSize, 'input');
      const ids = truncatePrompt(typeof p === 'string' ? tok.encode(p, { addSpecialTokens }) : p, truncate, d.maxModelLen);
      if (ids.length > d.maxModelLen) {
        throw badRequest(`This model's maximum context length is ${d.maxModelLen} tokens. However, you requested `
          + `${ids.length} tokens in the input for embedding generation. Please reduce the length of the input.`,
        'input', 'context_length_exceeded');
      }
      if (ids.length === 0) throw badRequest('`input` must not be empty (it tokenizes to no tokens).', 'input');
      return ids;
    });
    const id = `embd-${randomUUID().replaceAll('-', '')}`;
    const reqs: EngineRequest[] = prompts.map((ids, i) => ({
      requestId: `${id}-${i}`, promptTokenIds: ids, sampling: defaultSamplingParams({ maxTokens: 1 }),
      priority: 0, cacheSalt: null, arrivalTime,
      pooling: { normalize: pooler.normalize, dimensions },
    }));
    const controller = new AbortController();
    d.inflight.add(controller);
    const onClose = () => {
      if (!reply.raw.writableFinished) controller.abort();
    };
    reply.raw.on('close', onClose);
    try {
      const embeddings = await Promise.all(reqs.map((r) => embedOne(d, r, controller.signal)));
      const numTokens = prompts.reduce((a, p) => a + p.length, 0);
      return {
        id, object: 'list', created: Math.floor(arrivalTime / 1000), model,
        data: embeddings.map((e, index) => ({ index, object: 'embedding', embedding: format === 'float' ? e : base64Of(e) })),
        usage: { prompt_tokens: numTokens, total_tokens: numTokens, completion_tokens: 0, prompt_tokens_details: null },
      };
    } finally {
      reply.raw.off('close', onClose);
      d.inflight.delete(controller);
    }
  });
}

/** Runs one embedding request to its end: its embedding, or the engine's error as a 400. */
async function embedOne(d: RouteDeps, req: EngineRequest, signal: AbortSignal): Promise<number[]> {
  const { engine, metrics } = d.ctx;
  const abort = () => engine.abort(req.requestId);
  signal.addEventListener('abort', abort);
  try {
    for await (const out of engine.generate(req)) {
      if (out.error !== undefined) throw badRequest(out.error, 'input');
      if (out.embedding !== undefined) {
        metrics.observeFinished('stop', (Date.now() - req.arrivalTime) / 1000, req.promptTokenIds.length, 0);
        return out.embedding;
      }
      if (out.finished) break;
    }
    throw new ApiError(499, 'The request was aborted.', 'invalid_request_error', null, 'aborted');
  } finally {
    signal.removeEventListener('abort', abort);
  }
}

/** OpenAI's base64 embedding: the float32 values, little-endian, base64. */
export function base64Of(values: readonly number[]): string {
  const f = Float32Array.from(values);
  return Buffer.from(f.buffer, f.byteOffset, f.byteLength).toString('base64');
}
