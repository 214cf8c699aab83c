import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { postJson, startTestServer, type TestServer } from './helpers/start.js';

interface Case {
  name: string;
  path?: string;
  body: unknown;
  status?: number;
  /** Substrings the error message must contain. */
  mentions?: string[];
  param?: string;
  contentType?: string;
}

const C = '/v1/completions';
const CHAT = '/v1/chat/completions';
const ok = { prompt: 'hi', max_tokens: 2 };
const chatOk = { messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 };

const cases: Case[] = [
  { name: 'malformed JSON', body: '{"prompt": "hi",' },
  { name: 'JSON array body', body: '[1, 2]' },
  { name: 'JSON string body', body: '"hello"' },
  { name: 'empty body', body: '' },
  { name: 'wrong content type', body: 'prompt=hi', contentType: 'application/x-www-form-urlencoded' },
  { name: 'missing prompt', body: { max_tokens: 2 }, param: 'prompt' },
  { name: 'empty prompt', body: { prompt: '' }, param: 'prompt' },
  { name: 'empty prompt list', body: { prompt: [] }, param: 'prompt' },
  { name: 'prompt of mixed types', body: { prompt: ['a', 1] }, param: 'prompt' },
  { name: 'prompt beyond the context', body: { prompt: 'x'.repeat(300) }, mentions: ['256', '301'] },
  { name: 'prompt + max_tokens beyond the context', body: { prompt: 'x'.repeat(99), max_tokens: 200 }, mentions: ['256', '100', '200'], param: 'max_tokens' },
  { name: 'token id out of vocabulary', body: { prompt: [5, 259, 100000] }, mentions: ['259', '100000'], param: 'prompt' },
  { name: 'negative token id', body: { prompt: [[5, -1]] }, mentions: ['-1'], param: 'prompt' },
  { name: 'temperature negative', body: { ...ok, temperature: -0.5 }, param: 'temperature' },
  { name: 'temperature not a number', body: { ...ok, temperature: 'hot' }, param: 'temperature' },
  { name: 'top_p zero', body: { ...ok, top_p: 0 }, param: 'top_p' },
  { name: 'top_k below -1', body: { ...ok, top_k: -2 }, param: 'top_k' },
  { name: 'min_p above 1', body: { ...ok, min_p: 1.5 }, param: 'min_p' },
  { name: 'repetition_penalty zero', body: { ...ok, repetition_penalty: 0 }, param: 'repetition_penalty' },
  { name: 'presence_penalty beyond 2', body: { ...ok, presence_penalty: 3 }, param: 'presence_penalty' },
  { name: 'max_tokens zero', body: { ...ok, max_tokens: 0 }, param: 'max_tokens' },
  { name: 'max_tokens fractional', body: { ...ok, max_tokens: 2.5 }, param: 'max_tokens' },
  { name: 'n beyond the cap', body: { ...ok, n: 17 }, param: 'n' },
  { name: 'n zero', body: { ...ok, n: 0 }, param: 'n' },
  { name: 'logprobs beyond the cap', body: { ...ok, logprobs: 21 }, param: 'logprobs' },
  { name: 'chat top_logprobs beyond the cap', path: CHAT, body: { ...chatOk, logprobs: true, top_logprobs: 21 }, param: 'top_logprobs' },
  { name: 'logit_bias with bad keys (all listed)', body: { ...ok, logit_bias: { abc: 1, '999999': 2, '5': 1, '-3': 1 } }, mentions: ['"abc"', '"999999"', '"-3"'], param: 'logit_bias' },
  { name: 'logit_bias value out of range', body: { ...ok, logit_bias: { '5': 500 } }, param: 'logit_bias' },
  { name: 'stream_options without stream', body: { ...ok, stream_options: { include_usage: true } }, param: 'stream_options' },
  { name: 'too many stop strings', body: { ...ok, stop: Array.from({ length: 17 }, (_, i) => `s${i}`) }, mentions: ['17', '16'], param: 'stop' },
  { name: 'stop of wrong type', body: { ...ok, stop: 5 }, param: 'stop' },
  { name: 'stop_token_ids out of vocabulary', body: { ...ok, stop_token_ids: [1, 4000] }, mentions: ['4000'], param: 'stop_token_ids' },
  { name: 'seed not an integer', body: { ...ok, seed: 'abc' }, param: 'seed' },
  { name: 'chat without messages', path: CHAT, body: { max_tokens: 2 }, param: 'messages' },
  { name: 'chat with empty messages', path: CHAT, body: { messages: [] }, param: 'messages' },
  { name: 'chat message without role', path: CHAT, body: { messages: [{ content: 'x' }] } },
  { name: 'chat content part of unknown type', path: CHAT, body: { messages: [{ role: 'user', content: [{ type: 'image_url', image_url: {} }] }] } },
  { name: 'chat template in the request', path: CHAT, body: { ...chatOk, chat_template: '{{ messages }}' }, param: 'chat_template' },
  { name: 'chat prompt + max_tokens beyond the context', path: CHAT, body: { messages: [{ role: 'user', content: 'y'.repeat(200) }], max_tokens: 100 }, mentions: ['256'] },
  { name: 'unknown model', body: { ...ok, model: 'other-model' }, status: 404, mentions: ['other-model'], param: 'model' },
];

describe('bad input answers 4xx with an OpenAI error, and the next request succeeds', () => {
  let s: TestServer;
  before(async () => (s = await startTestServer({ limits: { bodyLimitBytes: 64 * 1024, maxHeaderBytes: 4096 } })));
  after(() => s.close());

  for (const c of cases) {
    it(c.name, async () => {
      const res = await fetch(s.url + (c.path ?? C), {
        method: 'POST',
        headers: { 'content-type': c.contentType ?? 'application/json' },
        body: typeof c.body === 'string' ? c.body : JSON.stringify(c.body),
      });
      const json = await res.json() as { error: Record<string, unknown> };
      assert.equal(res.status, c.status ?? 400, JSON.stringify(json));
      assert.deepEqual(Object.keys(json.error).sort(), ['code', 'message', 'param', 'type']);
      assert.equal(typeof json.error.message, 'string');
      assert.equal(json.error.type, c.status === 404 ? 'not_found_error' : 'invalid_request_error');
      if (c.param !== undefined) assert.equal(json.error.param, c.param);
      for (const m of c.mentions ?? []) assert.ok((json.error.message as string).includes(m), `"${json.error.message}" lacks ${m}`);
      const next = await postJson(s.url + (c.path ?? C), c.path === CHAT ? chatOk : ok);
      assert.equal(next.status, 200);
    });
  }

  it('accepts and ignores unknown fields', async () => {
    const r = await postJson(s.url + C, { ...ok, frobnicate: { deeply: [1] }, user: 'u1' });
    assert.equal(r.status, 200);
    assert.equal(r.json.choices.length, 1);
  });

  it('answers 413 to a body over the limit', async () => {
    const r = await postJson(s.url + C, { prompt: 'x'.repeat(70 * 1024) });
    assert.equal(r.status, 413);
    assert.equal(r.json.error.type, 'invalid_request_error');
    assert.equal((await postJson(s.url + C, ok)).status, 200);
  });

  it('answers 431 to headers over the limit', async () => {
    const r = await postJson(s.url + C, ok, { 'x-big': 'y'.repeat(8192) });
    assert.equal(r.status, 431);
    assert.equal(r.json.error.code, 'headers_too_large');
    assert.equal((await postJson(s.url + C, ok)).status, 200);
  });

  it('answers 404 in OpenAI shape to an unknown route', async () => {
    const r = await postJson(s.url + '/v1/nothing', ok);
    assert.equal(r.status, 404);
    assert.equal(typeof r.json.error.message, 'string');
  });
});

describe('request chat templates when allowed', () => {
  let s: TestServer;
  before(async () => (s = await startTestServer({ allowRequestChatTemplate: true })));
  after(() => s.close());

  it('renders the request template', async () => {
    const r = await postJson(`${s.url}/tokenize`, { messages: [{ role: 'user', content: 'ab' }], chat_template: '{% for m in messages %}{{ m.content }}{% endfor %}' });
    assert.equal(r.status, 200);
    assert.equal(r.json.count, 2);
    const bad = await postJson(`${s.url}${CHAT}`, { ...chatOk, chat_template: '{% for %}' });
    assert.equal(bad.status, 400);
    assert.equal(bad.json.error.param, 'chat_template');
  });
});
