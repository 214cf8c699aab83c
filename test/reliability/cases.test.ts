// Issue 38's cases replayed against a real `quire serve` on the demo model: each is answered (a 4xx naming its field,
// never a 5xx, never a hang), and after each the server still answers /health and a plain completion.

import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { send, startServe, stillServing, type Served } from './harness.js';

function nestedSchema(levels: number): Record<string, unknown> {
  let s: Record<string, unknown> = { type: 'string' };
  for (let i = 0; i < levels; i++) s = { type: 'object', properties: { a: s }, required: ['a'] };
  return s;
}

/** The same schema as text (3,000 levels overflow JSON.stringify's recursion on this side). */
function nestedSchemaText(levels: number): string {
  return '{"type": "object", "properties": {"a": '.repeat(levels) + '{"type": "string"}' + '}}'.repeat(levels);
}

const msg = { role: 'user', content: 'hi' };

interface Case {
  name: string;
  path?: string;
  body: unknown;
  contentType?: string;
  method?: string;
  /** The status expected (4xx). */
  status: number;
  param?: string;
}

const cases: Case[] = [
  { name: 'a JSON schema 55 objects deep', status: 400, param: 'response_format',
    body: { prompt: 'x', max_tokens: 2, response_format: { type: 'json_schema', json_schema: { name: 'd', schema: nestedSchema(55) } } } },
  { name: 'a JSON schema 3,000 objects deep (chat)', path: '/v1/chat/completions', status: 400,
    body: `{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "response_format": {"type": "json_schema", "json_schema": {"name": "d", "schema": ${nestedSchemaText(3000)}}}}` },
  { name: 'text.format 3,000 deep (responses)', path: '/v1/responses', status: 400,
    body: `{"input": "hi", "max_output_tokens": 2, "text": {"format": {"type": "json_schema", "name": "d", "schema": ${nestedSchemaText(3000)}}}}` },
  { name: 'an enum nested 3,000 lists deep', status: 400,
    body: `{"prompt": "x", "max_tokens": 2, "guided_json": {"type": "array", "enum": [${'['.repeat(3000)}${']'.repeat(3000)}]}}` },
  { name: 'an EBNF grammar of 20,000 rules', status: 400, param: 'structured_outputs.grammar',
    body: { prompt: 'x', max_tokens: 2, structured_outputs: { grammar: ['root ::= r0', ...Array.from({ length: 20_000 }, (_, i) => `r${i} ::= "a" | "b"`)].join('\n') } } },
  { name: 'a regex with an unpaired surrogate', status: 400, param: 'structured_outputs.regex',
    body: { prompt: 'x', max_tokens: 2, structured_outputs: { regex: '\ud800' } } },
  { name: '200,000 bad_words', status: 400, param: 'bad_words', body: { prompt: 'x', max_tokens: 2, bad_words: Array.from({ length: 200_000 }, (_, i) => `w${i}`) } },
  { name: '20,000 messages', path: '/v1/chat/completions', status: 400, param: 'messages', body: { messages: Array.from({ length: 20_000 }, () => msg) } },
  { name: '20,000 tools', path: '/v1/chat/completions', status: 400, param: 'tools',
    body: { messages: [msg], tools: Array.from({ length: 20_000 }, (_, i) => ({ type: 'function', function: { name: `f${i}` } })) } },
  { name: 'a 7 MB stop string', status: 400, param: 'stop', body: { prompt: 'x', max_tokens: 2, stop: 's'.repeat(7_000_000) } },
  { name: 'a 6 MB prompt', status: 400, param: 'prompt', body: { prompt: 'p '.repeat(3_000_000) } },
  { name: 'a 6 MB prompt to /tokenize', path: '/tokenize', status: 400, param: 'prompt', body: { prompt: 'p '.repeat(3_000_000) } },
  { name: 'a request chat template of nested loops', path: '/v1/chat/completions', status: 400, param: 'chat_template',
    body: { messages: [msg], max_tokens: 2, chat_template: '{% for a in range(1500) %}{% for b in range(1500) %}{% for c in range(1500) %}{{ c }}{% endfor %}{% endfor %}{% endfor %}' } },
  { name: 'a prompt that needs more KV cache than there is', status: 400, param: 'max_tokens', body: { prompt: 'x', max_tokens: 1_000_000 } },
  { name: 'a UTF-16 charset', status: 400, contentType: 'application/json; charset=utf-16', body: { prompt: 'x', max_tokens: 2 } },
  { name: 'text/plain with valid JSON', status: 400, contentType: 'text/plain', body: { prompt: 'x', max_tokens: 2 } },
  { name: 'GET on a POST route', status: 405, method: 'GET', body: null },
  { name: 'n = 16', status: 200, body: { prompt: 'x', max_tokens: 1, n: 16 } },
];

describe('issue 38 cases against quire serve', () => {
  let s: Served;
  before(async () => {
    s = await startServe(['--trust-request-chat-template', '--chat-template-render-timeout', '1']);
  });
  after(async () => {
    s.child.kill('SIGKILL');
    await s.exited;
  });

  for (const c of cases) {
    it(`${c.name}: ${c.status}, and the server serves on`, async () => {
      const r = await send(`${s.url}${c.path ?? '/v1/completions'}`, c.body, {
        ...(c.contentType ? { contentType: c.contentType } : {}), ...(c.method ? { method: c.method } : {}),
      });
      assert.equal(r.status, c.status, r.text.slice(0, 400));
      if (c.status >= 400) assert.equal(typeof r.json?.error?.message, 'string');
      if (c.param !== undefined) assert.equal(r.json.error.param, c.param);
      await stillServing(s.url);
    });
  }

  it('logged nothing of xgrammar\'s build paths and no MaxListenersExceededWarning', () => {
    assert.doesNotMatch(s.log(), /\.cc:\d+|MaxListenersExceededWarning/);
  });
});

describe('quire serve refusals and shutdown', () => {
  it('refuses to start with a KV cache smaller than one --max-model-len sequence, naming the flag', async () => {
    await assert.rejects(startServe(['--kv-cache-memory', '1000000']), /less than one sequence of --max-model-len 2048: raise --kv-cache-memory/);
  });

  it('ends within --shutdown-timeout after SIGTERM, whatever is in flight', async () => {
    const s = await startServe(['--shutdown-timeout', '1', '--trust-request-chat-template', '--chat-template-render-timeout', '60']);
    const loops = '{% for a in range(3000) %}{% for b in range(3000) %}{% for c in range(3000) %}{{ c }}{% endfor %}{% endfor %}{% endfor %}';
    const inFlight = [
      send(`${s.url}/v1/chat/completions`, { messages: [msg], chat_template: loops }).catch(() => null),
      send(`${s.url}/v1/completions`, { prompt: 'Once upon a time', max_tokens: 1500, ignore_eos: true }).catch(() => null),
    ];
    await new Promise((r) => setTimeout(r, 500));
    const t0 = Date.now();
    s.child.kill('SIGTERM');
    await s.exited;
    const seconds = (Date.now() - t0) / 1000;
    assert.ok(seconds < 1 + 3, `exited ${seconds} s after SIGTERM with --shutdown-timeout 1`);
    await Promise.all(inFlight);
  });
});
