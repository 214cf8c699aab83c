// The server over the real engine (worker thread, CPU backend) and a tiny random-weight model.

import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { createServer, type QuireServer } from '../../src/api/server.js';
import { listenOnLoopback, startTinyEngine, type TinyEngine } from './helpers/real-engine.js';
import { metricValue, postJson, scrapeMetrics } from './helpers/start.js';

describe('server over the real engine', () => {
  let tiny: TinyEngine;
  let server: QuireServer;
  let url = '';
  let client: OpenAI;

  before(async () => {
    tiny = await startTinyEngine(1, 256);
    const { model } = tiny;
    server = createServer({
      engine: tiny.engine, tokenizer: model.tokenizer, chatTemplate: model.chatTemplate, bosToken: model.bosToken,
      eosToken: model.eosToken, modelName: 'tiny', maxModelLen: 256,
    });
    url = await listenOnLoopback(server);
    client = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'unused', maxRetries: 0 });
  });

  after(async () => {
    await server?.app.close();
    await tiny?.dispose();
  });

  it('streams exactly the non-streamed greedy text', async () => {
    const full = await client.completions.create({ model: 'tiny', prompt: 'hello world', max_tokens: 12, temperature: 0, ignore_eos: true } as OpenAI.CompletionCreateParamsNonStreaming);
    assert.equal(full.usage?.completion_tokens, 12);
    const tokenized = await postJson(`${url}/tokenize`, { prompt: 'hello world' });
    assert.equal(full.usage?.prompt_tokens, tokenized.json.count);
    const stream = await client.completions.create({ model: 'tiny', prompt: 'hello world', max_tokens: 12, temperature: 0, ignore_eos: true, stream: true } as OpenAI.CompletionCreateParamsStreaming);
    let text = '';
    for await (const chunk of stream) text += chunk.choices.map((c) => c.text).join('');
    assert.equal(text, full.choices[0]!.text);
  });

  it('chats through the model template, with reproducible seeded choices', async () => {
    const messages = [{ role: 'user' as const, content: 'hi' }];
    const a = await client.chat.completions.create({ model: 'tiny', messages, max_tokens: 8, n: 2, seed: 7, temperature: 1 });
    const b = await client.chat.completions.create({ model: 'tiny', messages, max_tokens: 8, n: 2, seed: 7, temperature: 1 });
    assert.equal(a.choices.length, 2);
    assert.deepEqual(a.choices.map((c) => c.message.content), b.choices.map((c) => c.message.content));
  });

  it('leaves nothing running after streaming clients disconnect', async () => {
    await Promise.all(Array.from({ length: 8 }, async (_, i) => {
      const controller = new AbortController();
      try {
        const res = await fetch(`${url}/v1/completions`, {
          method: 'POST', headers: { 'content-type': 'application/json' }, signal: controller.signal,
          body: JSON.stringify({ model: 'tiny', prompt: `client ${i}`, max_tokens: 200, ignore_eos: true, stream: true }),
        });
        const reader = res.body!.getReader();
        await reader.read();
        controller.abort();
        await reader.read();
      } catch (e) {
        assert.equal((e as Error).name, 'AbortError');
      }
    }));
    const end = Date.now() + 3000;
    let m = await scrapeMetrics(url);
    while (Date.now() < end && metricValue(m, 'quire:num_requests_running') + metricValue(m, 'quire:num_requests_waiting') > 0) {
      await new Promise((r) => setTimeout(r, 20));
      m = await scrapeMetrics(url);
    }
    assert.equal(metricValue(m, 'quire:num_requests_running'), 0);
    assert.equal(metricValue(m, 'quire:num_requests_waiting'), 0);
    assert.equal(metricValue(m, 'quire:kv_cache_usage_perc'), 0);
    const r = await client.completions.create({ model: 'tiny', prompt: 'after', max_tokens: 3, temperature: 0, ignore_eos: true } as OpenAI.CompletionCreateParamsNonStreaming);
    assert.equal(r.usage?.completion_tokens, 3);
  });

  it('holds answers to a JSON schema, or a forced tool call, through the engine\'s worker thread', async () => {
    const schema = { type: 'object', properties: { mood: { enum: ['calm', 'stormy'] }, n: { type: 'integer', minimum: 0, maximum: 99 } },
      required: ['mood', 'n'], additionalProperties: false };
    for (const seed of [1, 2]) {
      const r = await client.chat.completions.create({
        model: 'tiny', messages: [{ role: 'user', content: 'the sea?' }], max_tokens: 60, temperature: 1, seed,
        response_format: { type: 'json_schema', json_schema: { name: 'sea', schema } },
      });
      assert.equal(r.choices[0]!.finish_reason, 'stop', r.choices[0]!.message.content ?? '');
      const v = JSON.parse(r.choices[0]!.message.content!) as { mood: string; n: number };
      assert.ok(['calm', 'stormy'].includes(v.mood) && Number.isInteger(v.n) && v.n >= 0 && v.n <= 99, JSON.stringify(v));
    }
    const tools = [{ type: 'function' as const, function: { name: 'pick', parameters: schema } }];
    const t = await client.chat.completions.create({
      model: 'tiny', messages: [{ role: 'user', content: 'pick' }], max_tokens: 60, temperature: 0, tools,
      tool_choice: { type: 'function', function: { name: 'pick' } },
    });
    const call = t.choices[0]!.message.tool_calls![0]!;
    assert.equal(call.type === 'function' ? call.function.name : null, 'pick');
    assert.ok(['calm', 'stormy'].includes(JSON.parse(call.type === 'function' ? call.function.arguments : '{}').mood));
  });
  it('scores a prompt as lm-eval asks (echo, logprobs, max_tokens 0) and keeps sampling in allowed_token_ids, through the worker', async () => {
    const prompt = 'the quick brown fox';
    const scored = await postJson(`${url}/v1/completions`, { model: 'tiny', prompt, max_tokens: 0, echo: true, logprobs: 1 });
    assert.equal(scored.status, 200);
    const ids = (await postJson(`${url}/tokenize`, { prompt })).json.tokens as number[];
    const lp = scored.json.choices[0].logprobs as { tokens: string[]; token_logprobs: (number | null)[] };
    assert.equal(scored.json.choices[0].text, prompt);
    assert.equal(lp.tokens.length, ids.length);
    assert.equal(lp.token_logprobs[0], null);
    assert.ok(lp.token_logprobs.slice(1).every((x) => x !== null && x <= 0), JSON.stringify(lp.token_logprobs));
    // the scored prompt's last token logprob is the one generation gives it after the tokens before it (forced by
    // allowed_token_ids: logprobs are the model's, before the mask)
    const gen = await postJson(`${url}/v1/completions`, { model: 'tiny', prompt: ids.slice(0, -1), max_tokens: 1, logprobs: 0,
      temperature: 0, allowed_token_ids: [ids.at(-1)] });
    assert.equal(gen.json.choices[0].logprobs.tokens[0], lp.tokens.at(-1));
    assert.ok(Math.abs(gen.json.choices[0].logprobs.token_logprobs[0] - lp.token_logprobs.at(-1)!) < 1e-4);
    const allowed = await postJson(`${url}/v1/completions`, { model: 'tiny', prompt, max_tokens: 6, temperature: 1, seed: 3,
      allowed_token_ids: [ids[1], ids[2]], return_token_ids: true, ignore_eos: true });
    assert.equal(allowed.status, 200);
    assert.ok((allowed.json.choices[0].token_ids as number[]).every((t) => t === ids[1] || t === ids[2]));
  });
});
