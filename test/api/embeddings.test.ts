// /v1/embeddings on a pooling runner over the real engine (worker thread, CPU backend, tiny random model), with the
// OpenAI client; and the refusals on either side of the runner.

import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { createServer, type QuireServer } from '../../src/api/server.js';
import { listenOnLoopback, startTinyEngine, type TinyEngine } from './helpers/real-engine.js';
import { metricValue, postJson, scrapeMetrics, startTestServer } from './helpers/start.js';

const norm = (v: number[]) => Math.sqrt(v.reduce((a, x) => a + x * x, 0));

describe('/v1/embeddings on a pooling runner', () => {
  let tiny: TinyEngine;
  let server: QuireServer;
  let url = '';
  let client: OpenAI;
  let hidden = 0;
  /** A pooling server over the shared engine. */
  const poolingServer = (modelName: string, matryoshkaDimensions: number[] | null) => createServer({
    engine: tiny.engine, tokenizer: tiny.model.tokenizer, chatTemplate: tiny.model.chatTemplate, modelName, maxModelLen: 64,
    pooler: { poolingType: 'LAST', normalize: true, matryoshkaDimensions }, hiddenSize: hidden,
  });

  before(async () => {
    tiny = await startTinyEngine(2, 64);
    hidden = tiny.model.config.hiddenSize;
    server = poolingServer('tiny-embed', []);
    url = await listenOnLoopback(server);
    client = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'unused', maxRetries: 0 });
  });

  after(async () => {
    await server?.app.close();
    await tiny?.dispose();
  });

  it('embeds a list of texts: one normalized vector each, in order, with usage', async () => {
    const res = await client.embeddings.create({ model: 'tiny-embed', input: ['hello world', 'a second, longer input text'] });
    assert.equal(res.object, 'list');
    assert.equal(res.model, 'tiny-embed');
    assert.deepEqual(res.data.map((d) => [d.index, d.object]), [[0, 'embedding'], [1, 'embedding']]);
    for (const d of res.data) {
      assert.equal(d.embedding.length, hidden);
      assert.ok(Math.abs(norm(d.embedding) - 1) < 1e-5);
    }
    const tokenized = await Promise.all(['hello world', 'a second, longer input text'].map((p) => postJson(`${url}/tokenize`, { prompt: p })));
    assert.equal(res.usage.prompt_tokens, tokenized[0]!.json.count + tokenized[1]!.json.count);
    assert.equal(res.usage.total_tokens, res.usage.prompt_tokens);
    // the same text alone gives the same vector (the CPU backend is batch-invariant); token ids give it too
    const alone = await client.embeddings.create({ model: 'tiny-embed', input: 'a second, longer input text' });
    assert.deepEqual(alone.data[0]!.embedding, res.data[1]!.embedding);
    const ids = await postJson(`${url}/v1/embeddings`, { input: tokenized[1]!.json.tokens });
    assert.deepEqual(ids.json.data[0].embedding, res.data[1]!.embedding);
  });

  it('the chat form: messages through the chat template, no generation prompt unless asked', async () => {
    const messages = [{ role: 'user', content: 'embed this' }];
    const chat = await postJson(`${url}/v1/embeddings`, { messages });
    assert.equal(chat.status, 200);
    const ids = await postJson(`${url}/tokenize`, { messages, add_generation_prompt: false });
    const same = await postJson(`${url}/v1/embeddings`, { input: ids.json.tokens });
    assert.deepEqual(chat.json.data[0].embedding, same.json.data[0].embedding);
    assert.equal(chat.json.usage.prompt_tokens, ids.json.count);
    const withPrompt = await postJson(`${url}/v1/embeddings`, { messages, add_generation_prompt: true });
    assert.ok(withPrompt.json.usage.prompt_tokens > ids.json.count, 'the generation prompt adds tokens');
    const both = await postJson(`${url}/v1/embeddings`, { messages, input: 'x' });
    assert.equal(both.status, 400);
    assert.match(both.json.error.message, /Send `input` or `messages`, not both/);
  });

  it('base64: the float32 values, little-endian', async () => {
    const f = await postJson(`${url}/v1/embeddings`, { input: 'hello world' });
    const b = await postJson(`${url}/v1/embeddings`, { input: 'hello world', encoding_format: 'base64' });
    const bytes = Buffer.from(b.json.data[0].embedding as string, 'base64');
    const decoded = Array.from(new Float32Array(bytes.buffer, bytes.byteOffset, bytes.byteLength / 4));
    assert.deepEqual(decoded, f.json.data[0].embedding, 'float32 values either way');
  });

  it('bad input gets a 400 naming it, and the server keeps serving', async () => {
    const cases: [unknown, RegExp, string][] = [
      [{ input: [] }, /`input` must not be empty/, 'input'],
      [{}, /`input` is required/, 'input'],
      [{ input: 'x', encoding_format: 'hex' }, /`encoding_format` must be "float" or "base64"/, 'encoding_format'],
      [{ input: 'x', dimensions: 8 }, /does not support matryoshka representation/, 'dimensions'],
      [{ input: 'word '.repeat(200) }, /maximum context length is 64 tokens.*in the input for embedding generation/, 'input'],
      [{ input: [[1, 2, 999999]] }, /token ids outside the vocabulary/, 'input'],
    ];
    for (const [body, message, param] of cases) {
      const r = await postJson(`${url}/v1/embeddings`, body);
      assert.equal(r.status, 400, JSON.stringify(body));
      assert.match(r.json.error.message, message);
      assert.equal(r.json.error.param, param);
    }
    const ok = await postJson(`${url}/v1/embeddings`, { input: 'still serving' });
    assert.equal(ok.status, 200);
    const metrics = await scrapeMetrics(url);
    assert.ok(metricValue(metrics, 'quire:request_success_total{finished_reason="stop"}') >= 1);
  });

  it('a Matryoshka model: dimensions keep the first values, normalized; more than the hidden size is refused', async () => {
    const m = poolingServer('tiny-mrl', null);
    const mUrl = await listenOnLoopback(m);
    try {
      const raw = await postJson(`${mUrl}/v1/embeddings`, { input: 'hello world' });
      const cut = await postJson(`${mUrl}/v1/embeddings`, { input: 'hello world', dimensions: 8 });
      const e = cut.json.data[0].embedding as number[];
      assert.equal(e.length, 8);
      assert.ok(Math.abs(norm(e) - 1) < 1e-6);
      const head = (raw.json.data[0].embedding as number[]).slice(0, 8);
      head.forEach((x, i) => assert.ok(Math.abs(x / norm(head) - e[i]!) < 1e-6));
      const big = await postJson(`${mUrl}/v1/embeddings`, { input: 'x', dimensions: hidden + 1 });
      assert.equal(big.status, 400);
      assert.match(big.json.error.message, new RegExp(`\\(${hidden + 1}\\) is larger than the model's embedding size \\(${hidden}\\)`));
    } finally {
      await m.app.close();
    }
  });

  it('the generation APIs are refused on a pooling runner', async () => {
    const r = await postJson(`${url}/v1/completions`, { prompt: 'hi', max_tokens: 2 });
    assert.equal(r.status, 400);
    assert.match(r.json.error.message, /served for embeddings \(--runner pooling\): it does not support the Completions API/);
    const c = await postJson(`${url}/v1/chat/completions`, { messages: [{ role: 'user', content: 'hi' }] });
    assert.match(c.json.error.message, /Chat Completions API/);
  });
});

it('a generating runner refuses /v1/embeddings, saying how to serve them', async () => {
  const s = await startTestServer();
  try {
    const r = await postJson(`${s.url}/v1/embeddings`, { input: 'hi' });
    assert.equal(r.status, 400);
    assert.match(r.json.error.message, /does not support the Embeddings API: serve it with --runner pooling/);
  } finally {
    await s.close();
  }
});
