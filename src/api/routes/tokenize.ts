// POST /tokenize, POST /detokenize (vLLM shapes), GET /v1/models.

import type { FastifyInstance } from 'fastify';
import { badRequest } from '../errors.js';
import { checkTokenIds } from '../prompt.js';
import { asObjectBody, optBool, optIntList, optString, parseChatRequest } from '../schemas.js';
import { chatPromptIds } from './chat.js';
import { resolveModel, type RouteDeps } from './deps.js';

export function registerTokenize(app: FastifyInstance, d: RouteDeps): void {
  const tok = d.tokenizer;
  app.post('/tokenize', async (request) => {
    const b = asObjectBody(request.body);
    resolveModel(d, optString(b, 'model'));
    let tokens: number[];
    if (b.messages !== undefined) {
      tokens = await chatPromptIds(d, parseChatRequest(b, d.limits));
    } else {
      const prompt = optString(b, 'prompt');
      if (prompt === null) throw badRequest('`prompt` (a string) or `messages` is required.', 'prompt');
      tokens = tok.encode(prompt, { addSpecialTokens: optBool(b, 'add_special_tokens') ?? true });
    }
    const tokenStrs = optBool(b, 'return_token_strs') ?? false;
    return {
      count: tokens.length,
      max_model_len: d.maxModelLen,
      tokens,
      ...(tokenStrs ? { token_strs: tokens.map((id) => tok.idToToken(id) ?? null) } : {}),
    };
  });

  app.post('/detokenize', async (request) => {
    const b = asObjectBody(request.body);
    resolveModel(d, optString(b, 'model'));
    const tokens = optIntList(b, 'tokens');
    if (tokens === null) throw badRequest('`tokens` (a list of token ids) is required.', 'tokens');
    checkTokenIds(tokens, tok.vocabSize, 'tokens');
    return { prompt: tok.decode(tokens, { skipSpecialTokens: false }) };
  });

  const created = Math.floor(Date.now() / 1000);
  app.get('/v1/models', async () => ({
    object: 'list',
    data: d.servedModelNames.map((id) => ({
      id,
      object: 'model',
      created,
      owned_by: 'quire',
      root: d.modelName,
      parent: null,
      max_model_len: d.maxModelLen,
    })),
  }));
}
