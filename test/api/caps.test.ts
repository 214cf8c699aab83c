// Every list and string a request carries has a cap, checked before anything is tokenized, rendered or compiled:
// a 400 in OpenAI's shape naming the field, the size and the limit's flag; the server serves the next request.

import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { postJson, startTestServer, type TestServer } from './helpers/start.js';
import { ByteTokenizer } from './helpers/fake-tokenizer.js';

class CountingTokenizer extends ByteTokenizer {
  numEncoded = 0;
  override encode(text: string, opts: { addSpecialTokens?: boolean } = {}): number[] {
    this.numEncoded++;
    return super.encode(text, opts);
  }
}

const C = '/v1/completions';
const CHAT = '/v1/chat/completions';
const ok = { prompt: 'hi', max_tokens: 2 };
const msg = { role: 'user', content: 'hi' };

describe('request caps', () => {
  let s: TestServer;
  const tok = new CountingTokenizer();
  before(async () => (s = await startTestServer({
    tokenizer: tok, allowRequestChatTemplate: true,
    limits: { maxPromptChars: 1000, maxMessages: 8, maxTools: 4, maxStopStrLen: 16, maxBadWords: 4, maxLogitBias: 4,
      maxAllowedTokenIds: 8, maxStopTokenIds: 4 },
  })));
  after(() => s.close());
  const tool = (name: string) => ({ type: 'function', function: { name, parameters: { type: 'object' } } });

  const cases: [string, string, Record<string, unknown>, string, RegExp][] = [
    ['prompt characters', C, { prompt: 'x'.repeat(1001) }, 'prompt', /1001 characters; at most 1000 are allowed \(--max-prompt-chars\)/],
    ['prompt characters over a list', C, { prompt: ['x'.repeat(600), 'y'.repeat(600)] }, 'prompt', /1200 characters/],
    ['message characters', CHAT, { messages: [msg, { role: 'user', content: [{ type: 'text', text: 'z'.repeat(1000) }] }] }, 'messages', /1002 characters/],
    ['messages', CHAT, { messages: Array.from({ length: 9 }, () => msg) }, 'messages', /9 messages; at most 8 are allowed \(--max-messages\)/],
    ['tools', CHAT, { messages: [msg], tools: ['a', 'b', 'c', 'd', 'e'].map(tool) }, 'tools', /5 tools; at most 4 are allowed \(--max-tools\)/],
    ['a stop string\'s length', C, { ...ok, stop: 'q'.repeat(17) }, 'stop', /17 characters; at most 16 are allowed \(--max-stop-str-len\)/],
    ['stop strings', C, { ...ok, stop: Array.from({ length: 17 }, (_, i) => `s${i}`) }, 'stop', /17 strings; at most 16 are allowed \(--max-stop-strings\)/],
    ['bad_words', C, { ...ok, bad_words: ['a', 'b', 'c', 'd', 'e'] }, 'bad_words', /5 words; at most 4 are allowed \(--max-bad-words\)/],
    ['a bad word\'s length', C, { ...ok, bad_words: ['w'.repeat(17)] }, 'bad_words', /--max-stop-str-len/],
    ['logit_bias entries', C, { ...ok, logit_bias: { 1: 1, 2: 1, 3: 1, 4: 1, 5: 1 } }, 'logit_bias', /5 entries; at most 4 are allowed \(--max-logit-bias\)/],
    ['allowed_token_ids', C, { ...ok, allowed_token_ids: Array.from({ length: 9 }, (_, i) => i) }, 'allowed_token_ids', /--max-allowed-token-ids/],
    ['stop_token_ids', C, { ...ok, stop_token_ids: [3, 4, 5, 6, 7] }, 'stop_token_ids', /--max-stop-token-ids/],
    ['/tokenize prompt characters', '/tokenize', { prompt: 'x'.repeat(2000) }, 'prompt', /--max-prompt-chars/],
    ['responses input characters', '/v1/responses', { input: 'x'.repeat(2000) }, 'input', /--max-prompt-chars/],
  ];
  for (const [name, path, body, param, message] of cases) {
    it(`caps ${name} before tokenizing`, async () => {
      const before = tok.numEncoded;
      const r = await postJson(s.url + path, body);
      assert.equal(r.status, 400, JSON.stringify(r.json));
      assert.equal(r.json.error.type, 'invalid_request_error');
      assert.equal(r.json.error.param, param);
      assert.match(r.json.error.message, message);
      assert.equal(tok.numEncoded, before, 'nothing was tokenized');
      assert.equal((await postJson(s.url + C, ok)).status, 200);
    });
  }

  it('lets requests within every cap through', async () => {
    const r = await postJson(s.url + C, { prompt: 'x'.repeat(100), max_tokens: 2, stop: ['ab', 'q'.repeat(16)], bad_words: ['a'],
      logit_bias: { 5: 1 }, allowed_token_ids: [5, 6], stop_token_ids: [7] });
    assert.equal(r.status, 200, JSON.stringify(r.json));
  });

  it('ends a request chat template past --chat-template-render-timeout with a 400, the event loop free meanwhile', async () => {
    const slow = '{% for a in range(3000) %}{% for b in range(3000) %}{{ a }}{% endfor %}{% endfor %}';
    const pending = postJson(s.url + CHAT, { messages: [msg], max_tokens: 2, chat_template: slow });
    assert.equal((await fetch(`${s.url}/health`)).status, 200);
    const r = await pending;
    assert.equal(r.status, 400);
    assert.equal(r.json.error.param, 'chat_template');
    assert.match(r.json.error.message, /within the limit of 2 s \(--chat-template-render-timeout\)/);
    const fine = await postJson(s.url + CHAT, { messages: [msg], max_tokens: 2, chat_template: '{{ messages[0].content }}' });
    assert.equal(fine.status, 200);
  });
});

describe('a request the KV cache cannot hold', () => {
  let s: TestServer;
  before(async () => {
    s = await startTestServer();
    s.server.setReady({ kvCacheTokens: 64 });
  });
  after(() => s.close());

  it('is a 400 naming max_tokens (or the prompt), and the next request is served', async () => {
    const r = await postJson(s.url + C, { prompt: 'x'.repeat(20), max_tokens: 100 });
    assert.equal(r.status, 400);
    assert.equal(r.json.error.param, 'max_tokens');
    assert.equal(r.json.error.code, 'kv_cache_exceeded');
    assert.match(r.json.error.message, /KV cache holds 64 tokens/);
    const p = await postJson(s.url + CHAT, { messages: [{ role: 'user', content: 'y'.repeat(100) }], max_tokens: 1 });
    assert.equal(p.status, 400);
    assert.equal(p.json.error.param, 'messages');
    assert.equal((await postJson(s.url + C, ok)).status, 200);
  });
});

describe('HTTP edges', () => {
  let s: TestServer;
  before(async () => (s = await startTestServer()));
  after(() => s.close());

  it('refuses a JSON body in a charset other than UTF-8 instead of misreading it', async () => {
    const r = await postJson(s.url + C, ok, { 'content-type': 'application/json; charset=utf-16' });
    assert.equal(r.status, 400);
    assert.match(r.json.error.message, /charset "utf-16"/);
    assert.equal((await postJson(s.url + C, ok, { 'content-type': 'application/json; charset=UTF-8' })).status, 200);
  });

  it('tells a text/plain sender which content type to use', async () => {
    const r = await postJson(s.url + C, ok, { 'content-type': 'text/plain' });
    assert.equal(r.status, 400);
    assert.equal(r.json.error.code, 'invalid_content_type');
    assert.match(r.json.error.message, /application\/json/);
  });

  it('answers 405 with Allow to a GET on a POST route, and 404 to no route', async () => {
    const r = await fetch(s.url + C);
    assert.equal(r.status, 405);
    assert.equal(r.headers.get('allow'), 'POST');
    assert.equal(((await r.json()) as { error: { code: string } }).error.code, 'method_not_allowed');
    assert.equal((await fetch(`${s.url}/v1/nowhere`)).status, 404);
  });
});
