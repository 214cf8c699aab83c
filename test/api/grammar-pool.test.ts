// Structured outputs compile in the worker pool: limits are 400s before any compile, a compile past its time limit is
// a 400 naming the limit, a trap is a 500 that shows nothing of the compiler's memory, and after either the next
// request compiles in a fresh instance. The event loop answers /health while a compile runs.

import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { postJson, startTestServer, type TestServer } from './helpers/start.js';
import { WorkerPool } from '../../src/api/worker-pool.js';

const CHAT = '/v1/chat/completions';
const chat = (extra: Record<string, unknown>) => ({ messages: [{ role: 'user', content: 'q' }], max_tokens: 2, ...extra });

function nestedSchema(levels: number): Record<string, unknown> {
  let s: Record<string, unknown> = { type: 'string' };
  for (let i = 0; i < levels; i++) s = { type: 'object', properties: { a: s }, required: ['a'] };
  return s;
}

function chainGrammar(numRules: number): string {
  const rules = ['root ::= r0'];
  for (let i = 0; i < numRules; i++) rules.push(`r${i} ::= "a${i}" ${i + 1 < numRules ? `r${i + 1}` : '"z"'} | "b"`);
  return rules.join('\n');
}

describe('grammar limits (checked before compiling)', () => {
  let s: TestServer;
  before(async () => (s = await startTestServer()));
  after(() => s.close());

  const cases: [string, Record<string, unknown>, string, RegExp][] = [
    ['a schema 55 objects deep', { response_format: { type: 'json_schema', json_schema: { name: 'x', schema: nestedSchema(55) } } },
      'response_format', /111 levels deep; at most 64 are allowed \(--max-json-schema-depth\)/],
    ['an enum nested 200 lists deep', { guided_json: { type: 'array', enum: [JSON.parse('['.repeat(200) + ']'.repeat(200))] } },
      'guided_json', /levels deep; at most 64/],
    ['a grammar of 1,001 rules', { structured_outputs: { grammar: chainGrammar(1001) } }, 'structured_outputs.grammar',
      /has 1002 rules; at most 1000 are allowed \(--max-grammar-rules\)/],
    ['an enum of 2,000 entries', { guided_json: { enum: Array.from({ length: 2000 }, (_, i) => i) } }, 'guided_json',
      /`enum` of 2000 entries; at most 1024/],
    ['2,000 choices', { guided_choice: Array.from({ length: 2000 }, (_, i) => `c${i}`) }, 'guided_choice', /2000 choices; at most 1024/],
    ['a regex of groups 100 deep', { guided_regex: '('.repeat(100) + 'a' + ')'.repeat(100) }, 'guided_regex', /groups 100 levels deep/],
    ['a regex with an unpaired surrogate', { structured_outputs: { regex: '\ud800' } }, 'structured_outputs.regex', /unpaired UTF-16 surrogate/],
    ['a choice with an unpaired surrogate', { guided_choice: ['a\udc00'] }, 'guided_choice', /unpaired UTF-16 surrogate/],
  ];
  for (const [name, extra, param, message] of cases) {
    it(`refuses ${name} with a 400 naming the field and the limit`, async () => {
      const r = await postJson(s.url + CHAT, chat(extra));
      assert.equal(r.status, 400, JSON.stringify(r.json).slice(0, 300));
      assert.equal(r.json.error.param, param);
      assert.match(r.json.error.message, message);
      assert.equal(s.server.pool.numWorkers, 0, 'nothing reached the compiler');
    });
  }

  it('refuses a body nested deeper than the body limit before any route reads it', async () => {
    const r = await postJson(s.url + CHAT, `{"messages": [{"role": "user", "content": "q"}], "x": ${'['.repeat(5000)}${']'.repeat(5000)}}`);
    assert.equal(r.status, 400);
    assert.match(r.json.error.message, /more than 256 levels deep/);
  });
});

describe('grammar compiles in the worker pool', () => {
  let s: TestServer;
  // grammars compile against the demo model's vocabulary, as `quire serve` compiles them
  before(async () => (s = await startTestServer({
    limits: { maxJsonSchemaDepth: 1000, maxGrammarRules: 1_000_000, maxGrammarChars: 8_000_000, grammarCompileTimeoutMs: 1500 },
    grammarVocab: { tokenizerJsonPath: 'models/quire-demo/tokenizer.json', vocabSize: 6144, stopTokenIds: [] },
  })));
  after(() => s.close());

  it('answers a trap with a 500 that leaks nothing, and compiles the next request in a fresh instance', async () => {
    const secret = 'SECRET-' + 'x'.repeat(40);
    const first = await postJson(s.url + CHAT, chat({ guided_json: { type: 'object', properties: { [secret]: { type: 'string' } } } }));
    assert.equal(first.status, 200);
    const replacedBefore = s.server.pool.numReplaced;
    const r = await postJson(s.url + CHAT, chat({ response_format: { type: 'json_schema', json_schema: { name: 'x', schema: nestedSchema(60) } } }));
    assert.equal(r.status, 500);
    assert.equal(r.json.error.type, 'server_error');
    assert.doesNotMatch(JSON.stringify(r.json), /SECRET|Aborted|memory access|[0-9]{5,}/);
    assert.ok(s.server.pool.numReplaced > replacedBefore, 'the trapped worker was replaced');
    for (const extra of [{ response_format: { type: 'json_object' } }, { guided_regex: '[a-c]+' }, { guided_choice: ['x', 'y'] }]) {
      const ok = await postJson(s.url + CHAT, chat(extra));
      assert.equal(ok.status, 200, JSON.stringify(ok.json));
    }
  });

  it('ends a compile past --grammar-compile-timeout with a 400 naming it, while /health answers', async () => {
    const slow = postJson(s.url + CHAT, chat({ structured_outputs: { grammar: chainGrammar(60_000) } }));
    const health = await fetch(`${s.url}/health`);
    assert.equal(health.status, 200);
    const r = await slow;
    assert.equal(r.status, 400);
    assert.equal(r.json.error.param, 'structured_outputs.grammar');
    assert.match(r.json.error.message, /within the limit of 1.5 s \(--grammar-compile-timeout\)/);
    const ok = await postJson(s.url + CHAT, chat({ guided_grammar: 'root ::= "yes"' }));
    assert.equal(ok.status, 200);
  });

  it('keeps a refused grammar a 400 with xgrammar\'s reason; the worker (not spent by a refusal) compiles the next', async () => {
    assert.equal((await postJson(s.url + CHAT, chat({ guided_regex: '[ab]' }))).status, 200);
    const replacedBefore = s.server.pool.numReplaced;
    const bad = await postJson(s.url + CHAT, chat({ structured_outputs: { regex: '[a' } }));
    assert.equal(bad.status, 400);
    assert.match(bad.json.error.message, /Unclosed '\['/);
    assert.equal(s.server.pool.numReplaced, replacedBefore);
    const ok = await postJson(s.url + CHAT, chat({ structured_outputs: { regex: '[ab]+' } }));
    assert.equal(ok.status, 200);
  });
});

describe('WorkerPool', () => {
  it('rejects what is queued and in flight when it closes', async () => {
    const pool = new WorkerPool({ size: 1, grammarVocab: null });
    const running = pool.run({ kind: 'grammar', spec: { type: 'grammar', ebnf: chainGrammar(60_000) } }, 60_000);
    const queued = pool.run({ kind: 'grammar', spec: { type: 'grammar', ebnf: 'root ::= "a"' } }, 60_000);
    const ended = [assert.rejects(running, /closed/), assert.rejects(queued, /closed/)];
    await new Promise((r) => setTimeout(r, 300));
    await pool.close();
    await Promise.all(ended);
    assert.equal(pool.numWorkers, 0);
  });
});
