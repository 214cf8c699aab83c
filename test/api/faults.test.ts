import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from '../../src/api/server.js';
import { FakeEngine } from './helpers/fake-engine.js';
import { ByteTokenizer, CHATML_TEMPLATE } from './helpers/fake-tokenizer.js';
import { metricValue, postJson, readSse, scrapeMetrics, startTestServer, type TestServer } from './helpers/start.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function waitFor(cond: () => Promise<boolean> | boolean, timeoutMs: number): Promise<boolean> {
  const end = Date.now() + timeoutMs;
  while (Date.now() < end) {
    if (await cond()) return true;
    await sleep(10);
  }
  return cond();
}

describe('clients that disconnect', () => {
  let s: TestServer;
  before(async () => (s = await startTestServer({}, { tokenDelayMs: 5, maxRunning: 64 })));
  after(() => s.close());

  it('abort their engine requests at once: 200 clients leaving at random moments leave nothing running', async () => {
    const numClients = 200;
    let numMidStream = 0;
    const clients = Array.from({ length: numClients }, async (_, i) => {
      const controller = new AbortController();
      const stream = i % 4 !== 0;
      const leavesMidStream = stream && i % 2 === 1;
      if (!leavesMidStream) setTimeout(() => controller.abort(), Math.random() * 200);
      try {
        const res = await fetch(`${s.url}/v1/completions`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ prompt: `client ${i}`, max_tokens: 200, stream }),
          signal: controller.signal,
        });
        if (leavesMidStream) {
          const reader = res.body!.getReader();
          await reader.read();
          numMidStream++;
          setTimeout(() => controller.abort(), Math.random() * 100);
          for (;;) if ((await reader.read()).done) break;
        }
        await res.text();
      } catch (e) {
        assert.equal((e as Error).name, 'AbortError');
      }
    });
    await Promise.all(clients);
    const idle = await waitFor(async () => {
      const m = await scrapeMetrics(s.url);
      return metricValue(m, 'quire:num_requests_running') === 0 && metricValue(m, 'quire:num_requests_waiting') === 0;
    }, 2000);
    assert.ok(idle, 'engine still has running or waiting requests');
    assert.equal(s.server.numInflight, 0);
    const submitted = new Set(s.engine.submitted.map((r) => r.requestId));
    assert.equal(numMidStream, numClients / 2);
    assert.ok(s.engine.abortedIds.length >= numMidStream);
    for (const id of s.engine.abortedIds) assert.ok(submitted.has(id));
    const t0 = Date.now();
    const r = await postJson(`${s.url}/v1/completions`, { prompt: 'after', max_tokens: 4 });
    assert.equal(r.status, 200);
    assert.equal(r.json.usage.completion_tokens, 4);
    assert.ok(Date.now() - t0 < 1000, `short request took ${Date.now() - t0} ms`);
  });
});

describe('drain', () => {
  it('answers 503 to health and new requests, lets running ones finish, then aborts the rest', async () => {
    const s = await startTestServer({}, { tokenDelayMs: 5 });
    try {
      const quick = postJson(`${s.url}/v1/completions`, { prompt: 'quick', max_tokens: 10 });
      const slow = fetch(`${s.url}/v1/completions`, {
        method: 'POST', headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ prompt: 'slow', max_tokens: 250, stream: true }),
      });
      await waitFor(() => s.engine.stats().numRunning === 2, 2000);
      const drained = s.server.drain(300);
      assert.equal((await fetch(`${s.url}/health`)).status, 503);
      const refused = await postJson(`${s.url}/v1/completions`, { prompt: 'late', max_tokens: 2 });
      assert.equal(refused.status, 503);
      assert.equal(refused.json.error.type, 'service_unavailable_error');
      const q = await quick;
      assert.equal(q.status, 200);
      assert.equal(q.json.choices[0].finish_reason, 'length');
      const frames = await readSse(await slow);
      assert.equal(frames.at(-1), '[DONE]');
      const finish = frames.slice(0, -1).map((f) => JSON.parse(f)).flatMap((c) => c.choices).find((c) => c.finish_reason !== null);
      assert.equal(finish.finish_reason, 'abort');
      await drained;
      assert.equal(s.server.numInflight, 0);
      assert.equal(s.engine.stats().numRunning, 0);
    } finally {
      await s.close();
    }
  });
});

describe('engine failure', () => {
  it('ends a stream with an error frame then [DONE]; health and new requests answer 503', async () => {
    const s = await startTestServer({}, { tokenDelayMs: 5 });
    try {
      const res = fetch(`${s.url}/v1/chat/completions`, {
        method: 'POST', headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ messages: [{ role: 'user', content: 'x' }], max_tokens: 200, stream: true }),
      });
      const plain = postJson(`${s.url}/v1/completions`, { prompt: 'y', max_tokens: 200 });
      await waitFor(() => s.engine.stats().numRunning === 2, 2000);
      s.engine.fail('device lost');
      const failed = await plain;
      assert.equal(failed.status, 503);
      assert.match(failed.json.error.message, /device lost/);
      const frames = await readSse(await res);
      assert.equal(frames.at(-1), '[DONE]');
      const err = JSON.parse(frames.at(-2)!);
      assert.equal(err.error.type, 'service_unavailable_error');
      assert.match(err.error.message, /device lost/);
      assert.equal((await fetch(`${s.url}/health`)).status, 503);
      assert.equal((await postJson(`${s.url}/v1/completions`, { prompt: 'x' })).status, 503);
    } finally {
      await s.close();
    }
  });
});

describe('health while loading', () => {
  it('answers 503 until setReady', async () => {
    const engine = new FakeEngine();
    const server = createServer({ engine, tokenizer: new ByteTokenizer(), chatTemplate: CHATML_TEMPLATE, modelName: 'm', maxModelLen: 64 });
    try {
      assert.equal((await server.app.inject({ method: 'GET', url: '/health' })).statusCode, 503);
      const early = await server.app.inject({ method: 'POST', url: '/v1/completions', payload: { prompt: 'x' } });
      assert.equal(early.statusCode, 503);
      server.setReady();
      assert.equal((await server.app.inject({ method: 'GET', url: '/health' })).statusCode, 200);
    } finally {
      await server.app.close();
    }
  });
});

describe('API key', () => {
  let s: TestServer;
  before(async () => (s = await startTestServer({ apiKey: 'sekrit' })));
  after(() => s.close());

  it('requires Authorization: Bearer <key> on /v1 routes', async () => {
    for (const headers of [{}, { authorization: 'Bearer wrong' }, { authorization: 'sekrit' }] as Record<string, string>[]) {
      const r = await postJson(`${s.url}/v1/completions`, { prompt: 'x', max_tokens: 1 }, headers);
      assert.equal(r.status, 401);
      assert.equal(r.json.error.type, 'authentication_error');
    }
    assert.equal((await fetch(`${s.url}/v1/models`)).status, 401);
    const okReq = await postJson(`${s.url}/v1/completions`, { prompt: 'x', max_tokens: 1 }, { authorization: 'Bearer sekrit' });
    assert.equal(okReq.status, 200);
    assert.equal((await fetch(`${s.url}/health`)).status, 200);
  });
});
