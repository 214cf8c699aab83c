// POST /v1/completions

import type { FastifyInstance } from 'fastify';
import { samplingFromBody } from '../sampling.js';
import { completionLogprobs, offsetAfter, promptLogprobsJson } from '../logprobs.js';
import { checkFitsKvCache, checkTokenIds, choiceRequests, newResponseId, resolveMaxTokens, truncatePrompt } from '../prompt.js';
import { parseCompletionRequest, type Body, type CompletionRequest } from '../schemas.js';
import { serveChoices, type ChoiceFormatter, type Usage } from '../serve.js';
import type { ChoiceDelta, ChoiceOutcome } from '../generation.js';
import { structuredOutputFromBody } from '../structured.js';
import { resolveModel, type RouteDeps } from './deps.js';

interface PreparedPrompt {
  ids: number[];
  text: string;
}

export function registerCompletions(app: FastifyInstance, d: RouteDeps): void {
  app.post('/v1/completions', async (request, reply) => {
    const arrivalTime = Date.now();
    const r = parseCompletionRequest(request.body, d.limits);
    const model = resolveModel(d, r.model);
    const tok = d.tokenizer;
    const base = samplingFromBody(request.body as Body, {
      vocabSize: tok.vocabSize, limits: d.limits, logprobs: r.logprobs, promptLogprobs: r.promptLogprobs,
      maxTokens: r.maxTokens ?? d.maxModelLen, tokenizer: tok, defaults: d.samplingDefaults,
    });
    base.structuredOutput = await structuredOutputFromBody(request.body as Body, d.grammar);
    const prompts: PreparedPrompt[] = r.prompts.map((p) => {
      const given = typeof p === 'string' ? tok.encode(p, { addSpecialTokens: true }) : p;
      if (typeof p !== 'string') checkTokenIds(p, tok.vocabSize, 'prompt');
      const ids = truncatePrompt(given, r.truncatePromptTokens, d.maxModelLen);
      // an echoed prompt is the text of the tokens the model saw (all of them, or what truncation kept)
      const text = !r.echo ? '' : typeof p === 'string' && ids === given ? p : tok.decode(ids, { skipSpecialTokens: false });
      return { ids, text };
    });
    const id = newResponseId('cmpl');
    const reqs = prompts.flatMap((p, i) => {
      const maxTokens = resolveMaxTokens(p.ids.length, r.maxTokens, d.maxModelLen, 'prompt');
      checkFitsKvCache(d.kvCacheTokens, p.ids.length, maxTokens, 'prompt');
      return choiceRequests(id, i, p.ids, { ...base, maxTokens }, r, arrivalTime);
    });
    const fmt = completionFormatter(d, r, prompts, { id, model, created: Math.floor(arrivalTime / 1000) });
    return serveChoices(request, reply, {
      ctx: d.ctx, inflight: d.inflight, reqs, promptLengths: prompts.map((p) => p.ids.length), n: r.n,
      stream: r.stream, includeUsage: r.includeUsage, continuousUsage: r.continuousUsage, fmt,
      dropGenerated: r.echoWithoutGeneration,
    });
  });
}

interface Header {
  id: string;
  model: string;
  created: number;
}

function completionFormatter(d: RouteDeps, r: CompletionRequest, prompts: PreparedPrompt[], h: Header): ChoiceFormatter {
  const head = { id: h.id, object: 'text_completion', created: h.created, model: h.model };
  const promptOf = (index: number) => prompts[Math.floor(index / r.n)]!;
  const numChoices = prompts.length * r.n;
  // echo with logprobs: the prompt goes out with its logprobs, so with the first delta (they come with it), and
  // text offsets count token texts from 0 as vLLM's do; else the echoed text opens the stream
  const echoLater = r.echo && r.logprobs !== null;
  const textOffsets = Array.from({ length: numChoices }, (_, i) => (r.echo && !echoLater ? promptOf(i).text.length : 0));
  const logprobsOf = (o: { logprobs: ChoiceDelta['logprobs']; promptLogprobs?: ChoiceDelta['promptLogprobs'] | null },
    offset: number, index: number) => {
    if (r.logprobs === null) return null;
    const prompt = echoLater && o.promptLogprobs ? { ids: promptOf(index).ids, logprobs: o.promptLogprobs } : undefined;
    return completionLogprobs(d.tokenizer, o.logprobs, r.logprobs, offset, prompt,
      r.returnTokensAsTokenIds ?? d.returnTokensAsTokenIds);
  };
  const promptLogprobsField = (o: { promptLogprobs?: ChoiceDelta['promptLogprobs'] | null }) =>
    r.promptLogprobs === null || !o.promptLogprobs ? {} : { prompt_logprobs: promptLogprobsJson(d.tokenizer, o.promptLogprobs) };
  return {
    openingChunks() {
      if (!(r.echo && !echoLater) && !r.returnTokenIds) return [];
      return Array.from({ length: numChoices }, (_, index) => ({
        ...head,
        choices: [{
          index, text: r.echo && !echoLater ? promptOf(index).text : '', logprobs: null, finish_reason: null,
          ...(r.returnTokenIds ? { prompt_token_ids: promptOf(index).ids, token_ids: [] } : {}),
        }],
      }));
    },
    deltaChunk(delta: ChoiceDelta) {
      // as vLLM: a chunk per step that made tokens, its text empty while the detokenizer holds back an incomplete
      // character, so clients see every token arrive (TTFT, inter-token latency)
      const first = delta.promptLogprobs !== undefined;
      if (delta.text === '' && delta.tokenIds.length === 0 && r.logprobs === null && !r.returnTokenIds && !first) return null;
      const text = (echoLater && first ? promptOf(delta.index).text : '') + delta.text;
      const logprobs = logprobsOf(delta, textOffsets[delta.index]!, delta.index);
      textOffsets[delta.index] = logprobs ? offsetAfter(logprobs, textOffsets[delta.index]!) : textOffsets[delta.index]! + text.length;
      return {
        ...head,
        choices: [{
          index: delta.index, text, logprobs, finish_reason: null, ...promptLogprobsField(delta),
          ...(r.returnTokenIds ? { token_ids: delta.tokenIds } : {}),
        }],
      };
    },
    finishChunks(o: ChoiceOutcome) {
      return [{ ...head, choices: [{ index: o.index, text: '', logprobs: null, finish_reason: o.finishReason, stop_reason: o.stopReason }] }];
    },
    usageChunk(usage: Usage) {
      return { ...head, choices: [], usage };
    },
    response(outcomes: ChoiceOutcome[], usage: Usage) {
      return {
        ...head,
        choices: outcomes.map((o) => {
          const prompt = promptOf(o.index);
          const prefix = r.echo ? prompt.text : '';
          return {
            index: o.index,
            text: prefix + o.text,
            logprobs: logprobsOf(o, echoLater ? 0 : prefix.length, o.index),
            finish_reason: o.finishReason,
            stop_reason: o.stopReason,
            ...promptLogprobsField(o),
            ...(r.returnTokenIds ? { prompt_token_ids: prompt.ids, token_ids: o.tokenIds } : {}),
          };
        }),
        usage,
      };
    },
  };
}
