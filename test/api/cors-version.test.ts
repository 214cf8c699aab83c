// CORS as vLLM's defaults (any origin; preflights pass the API key check), the origins an operator names, and
// vLLM's /version and /ping.

import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { createServer } from '../../src/api/server.js';
import { FakeEngine } from './helpers/fake-engine.js';
import { ByteTokenizer } from './helpers/fake-tokenizer.js';
import { startTestServer } from './helpers/start.js';

const preflight = (url: string, origin: string) => fetch(url, {
  method: 'OPTIONS',
  headers: { origin, 'access-control-request-method': 'POST', 'access-control-request-headers': 'authorization,content-type' },
});

describe('CORS', () => {
  it('answers a preflight for any origin by default, even with an API key, and marks the answers', async () => {
    const s = await startTestServer({ apiKey: 'sekret' });
    try {
      const p = await preflight(`${s.url}/v1/chat/completions`, 'https://ui.example');
      assert.equal(p.status, 204);
      assert.equal(p.headers.get('access-control-allow-origin'), '*');
      assert.match(p.headers.get('access-control-allow-methods') ?? '', /POST/);
      assert.equal(p.headers.get('access-control-allow-headers'), 'authorization,content-type');
      const r = await fetch(`${s.url}/v1/models`, { headers: { origin: 'https://ui.example', authorization: 'Bearer sekret' } });
      assert.equal(r.status, 200);
      assert.equal(r.headers.get('access-control-allow-origin'), '*');
      const refused = await fetch(`${s.url}/v1/models`, { headers: { origin: 'https://ui.example' } });
      assert.equal(refused.status, 401);
    } finally {
      await s.close();
    }
  });

  it('allows only the origins named, with credentials when asked', async () => {
    const s = await startTestServer({ cors: { allowedOrigins: ['https://a.example'], allowedMethods: ['POST'], allowedHeaders: ['content-type'], allowCredentials: true } });
    try {
      const a = await preflight(`${s.url}/v1/completions`, 'https://a.example');
      assert.equal(a.headers.get('access-control-allow-origin'), 'https://a.example');
      assert.equal(a.headers.get('access-control-allow-credentials'), 'true');
      assert.equal(a.headers.get('access-control-allow-methods'), 'POST');
      assert.equal(a.headers.get('access-control-allow-headers'), 'content-type');
      const b = await preflight(`${s.url}/v1/completions`, 'https://b.example');
      assert.equal(b.headers.get('access-control-allow-origin'), null);
    } finally {
      await s.close();
    }
  });
});

describe('/version and /ping', () => {
  it('/version gives package.json\'s version; /ping answers as /health, GET or POST', async () => {
    const s = await startTestServer();
    try {
      const pkg = JSON.parse(readFileSync(new URL('../../../package.json', import.meta.url), 'utf8')) as { version: string };
      assert.deepEqual(await (await fetch(`${s.url}/version`)).json(), { version: pkg.version });
      assert.equal((await fetch(`${s.url}/ping`)).status, 200);
      assert.equal((await fetch(`${s.url}/ping`, { method: 'POST' })).status, 200);
    } finally {
      await s.close();
    }
  });

  it('/ping is 503 while the model loads', async () => {
    const server = createServer({ engine: new FakeEngine(), tokenizer: new ByteTokenizer(), chatTemplate: null, modelName: 'm', maxModelLen: 64 });
    try {
      const r = await server.app.inject({ method: 'GET', url: '/ping' });
      assert.equal(r.statusCode, 503);
      assert.equal(r.json().status, 'loading');
    } finally {
      await server.app.close();
    }
  });
});
