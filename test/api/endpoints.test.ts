import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { ByteTokenizer } from './helpers/fake-tokenizer.js';
import { MODEL, metricValue, postJson, scrapeMetrics, startTestServer, type TestServer } from './helpers/start.js';

const tok = new ByteTokenizer();

describe('tokenize, detokenize, models, health', () => {
  let s: TestServer;
  before(async () => (s = await startTestServer({ servedModelNames: ['alias'] })));
  after(() => s.close());

  it('tokenizes text and chat messages in vLLM shape', async () => {
    const r = await postJson(`${s.url}/tokenize`, { prompt: 'héllo', return_token_strs: true });
    assert.equal(r.status, 200);
    assert.deepEqual(r.json.tokens, tok.encode('héllo'));
    assert.equal(r.json.count, tok.encode('héllo').length);
    assert.equal(r.json.max_model_len, 256);
    assert.equal(r.json.token_strs.length, r.json.count);
    const noBos = await postJson(`${s.url}/tokenize`, { prompt: 'a', add_special_tokens: false });
    assert.deepEqual(noBos.json.tokens, tok.encode('a', { addSpecialTokens: false }));
    const chat = await postJson(`${s.url}/tokenize`, { messages: [{ role: 'user', content: 'q' }] });
    assert.equal(tok.decode(chat.json.tokens, { skipSpecialTokens: false }), '<bos><|user|>q\n<|assistant|>');
  });

  it('detokenizes, refusing ids outside the vocabulary', async () => {
    const r = await postJson(`${s.url}/detokenize`, { tokens: tok.encode('round trip') });
    assert.equal(r.json.prompt, '<bos>round trip');
    const bad = await postJson(`${s.url}/detokenize`, { tokens: [1, 9999] });
    assert.equal(bad.status, 400);
    assert.equal(bad.json.error.param, 'tokens');
  });

  it('serves every served model name and lists them', async () => {
    const models = await (await fetch(`${s.url}/v1/models`)).json() as { object: string; data: { id: string; max_model_len: number }[] };
    assert.equal(models.object, 'list');
    assert.deepEqual(models.data.map((m) => m.id), [MODEL, 'alias']);
    const r = await postJson(`${s.url}/v1/completions`, { model: 'alias', prompt: 'x', max_tokens: 1 });
    assert.equal(r.status, 200);
    assert.equal(r.json.model, 'alias');
  });

  it('passes vLLM extras and OpenAI sampling fields to the engine request', async () => {
    const r = await postJson(`${s.url}/v1/completions`, {
      prompt: 'x', max_tokens: 4, temperature: 0.5, top_p: 0.9, top_k: 7, min_p: 0.1, repetition_penalty: 1.2,
      presence_penalty: 0.5, frequency_penalty: -0.5, logit_bias: { '65': -100 }, seed: 3, stop_token_ids: [70],
      min_tokens: 2, ignore_eos: true, skip_special_tokens: false, include_stop_str_in_output: true, stop: 'zz',
      priority: -4, cache_salt: 'tenant-a', user: 'u', allowed_token_ids: [65, 66, 66], bad_words: [' ab'],
      speculative_decoding: false,
    });
    assert.equal(r.status, 200);
    const req = s.engine.submitted.at(-1)!;
    assert.equal(req.priority, -4);
    assert.equal(req.cacheSalt, 'tenant-a');
    assert.deepEqual(req.promptTokenIds, tok.encode('x'));
    assert.deepEqual(req.sampling, {
      maxTokens: 4, temperature: 0.5, topP: 0.9, topK: 7, minP: 0.1, repetitionPenalty: 1.2, presencePenalty: 0.5,
      frequencyPenalty: -0.5, logitBias: { 65: -100 }, seed: 3, stopTokenIds: [70], stop: ['zz'], includeStopStrInOutput: true,
      minTokens: 2, ignoreEos: true, logprobs: null, promptLogprobs: null, skipSpecialTokens: false, structuredOutput: null,
      speculativeDecoding: false,
      // bad words tokenized as vLLM does: leading spaces stripped ("ab" is bytes 97, 98: ids 100, 101)
      allowedTokenIds: [65, 66], badWords: [[100, 101]],
    });
  });

  it('health answers 200 when ready', async () => {
    assert.equal((await fetch(`${s.url}/health`)).status, 200);
  });

  it('defaults max_tokens to the rest of the context', async () => {
    const r = await postJson(`${s.url}/v1/completions`, { prompt: 'x'.repeat(249) });
    assert.equal(r.json.usage.completion_tokens, 256 - 250);
    assert.equal(r.json.choices[0].finish_reason, 'length');
  });
});

describe('/metrics', () => {
  let s: TestServer;
  before(async () => (s = await startTestServer({}, { eosAfter: 7, numCachedTokens: 2 })));
  after(() => s.close());

  it('counts exactly the requests served', async () => {
    const client = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: 'unused', maxRetries: 0 });
    let numPrompt = 0;
    let numGenerated = 0;
    let numChoices = 0;
    for (const [prompt, maxTokens, n] of [['one', 3, 1], ['two two', 5, 2], ['three', 20, 1]] as const) {
      const r = await client.completions.create({ model: MODEL, prompt, max_tokens: maxTokens, n, temperature: 0 });
      numPrompt += r.usage!.prompt_tokens * n;
      numGenerated += r.usage!.completion_tokens;
      numChoices += n;
    }
    await postJson(`${s.url}/v1/completions`, { prompt: 'bad', temperature: -1 });
    const m = await scrapeMetrics(s.url);
    assert.equal(metricValue(m, 'quire:prompt_tokens_total'), numPrompt);
    assert.equal(metricValue(m, 'quire:generation_tokens_total'), numGenerated);
    assert.equal(metricValue(m, 'quire:request_success_total{finished_reason="length"}'), 3);
    assert.equal(metricValue(m, 'quire:request_success_total{finished_reason="stop"}'), 1);
    assert.equal(metricValue(m, 'quire:time_to_first_token_seconds_count'), numChoices);
    assert.equal(metricValue(m, 'quire:e2e_request_latency_seconds_count'), numChoices);
    assert.equal(metricValue(m, 'quire:inter_token_latency_seconds_count'), numGenerated - numChoices);
    const stats = s.engine.stats();
    const numStepTokens = stats.numPromptTokens + stats.numGenerationTokens;
    assert.ok(Math.abs(metricValue(m, 'quire:iteration_tokens_total_sum') - numStepTokens) < 1e-6);
    assert.equal(metricValue(m, 'quire:iteration_tokens_total_count'), stats.numSteps);
    assert.equal(metricValue(m, 'quire:num_requests_running'), 0);
    assert.equal(metricValue(m, 'quire:kv_cache_usage_perc'), 0);
    assert.equal(metricValue(m, 'quire:prefix_cache_queries_total'), stats.prefixCacheQueries);
    assert.equal(metricValue(m, 'quire:prefix_cache_hits_total'), stats.prefixCacheHits);
    assert.ok(stats.prefixCacheHits > 0);
    assert.equal(metricValue(m, 'quire:num_preemptions_total'), 0);
  });
});
