// Structured-output fields reach the engine as one spec (response_format, structured_outputs, guided_*), and
// every malformed or uncompilable one is a 400 naming its field, before any generation.

import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { postJson, startTestServer, type TestServer } from './helpers/start.js';

describe('structured-output request fields', () => {
  let s: TestServer;
  before(async () => {
    s = await startTestServer();
  });
  after(() => s.close());
  const schema = { type: 'object', properties: { a: { type: 'integer' } }, required: ['a'] };

  async function specOf(path: string, extra: Record<string, unknown>): Promise<unknown> {
    const body = path === 'chat' ? { messages: [{ role: 'user', content: 'q' }], max_tokens: 2, ...extra } : { prompt: 'q', max_tokens: 2, ...extra };
    const r = await postJson(`${s.url}/v1/${path === 'chat' ? 'chat/completions' : 'completions'}`, body);
    assert.equal(r.status, 200, JSON.stringify(r.json));
    return s.engine.submitted.at(-1)!.sampling.structuredOutput;
  }

  it('hands the engine the spec of each way of asking, on both endpoints', async () => {
    for (const path of ['chat', 'completions']) {
      assert.deepEqual(await specOf(path, { response_format: { type: 'json_schema', json_schema: { name: 'x', schema } } }),
        { type: 'json', schema: JSON.stringify(schema) });
      assert.deepEqual(await specOf(path, { response_format: { type: 'json_object' } }), { type: 'json', schema: '{"type": "object"}' });
      assert.equal(await specOf(path, { response_format: { type: 'text' } }), null);
      assert.deepEqual(await specOf(path, { structured_outputs: { choice: ['a', 'b'] } }), { type: 'choice', choices: ['a', 'b'] });
      assert.deepEqual(await specOf(path, { structured_outputs: { json: schema } }), { type: 'json', schema: JSON.stringify(schema) });
      assert.deepEqual(await specOf(path, { guided_json: JSON.stringify(schema) }), { type: 'json', schema: JSON.stringify(schema) });
      assert.deepEqual(await specOf(path, { guided_choice: ['x'] }), { type: 'choice', choices: ['x'] });
      assert.deepEqual(await specOf(path, { structured_outputs: { regex: '[a-c]+' } }), { type: 'regex', pattern: '[a-c]+' });
      assert.deepEqual(await specOf(path, { guided_regex: '\\d{3}' }), { type: 'regex', pattern: '\\d{3}' });
      assert.deepEqual(await specOf(path, { structured_outputs: { grammar: 'root ::= "a" | "b"' } }), { type: 'grammar', ebnf: 'root ::= "a" | "b"' });
      assert.deepEqual(await specOf(path, { guided_grammar: 'root ::= "yes"' }), { type: 'grammar', ebnf: 'root ::= "yes"' });
      assert.deepEqual(await specOf(path, { response_format: { type: 'structural_tag', triggers: ['<fn='],
        structures: [{ begin: '<fn=a>', schema, end: '</fn>' }] } }), { type: 'structural_tag', tag: JSON.stringify({
        type: 'structural_tag', format: { type: 'triggered_tags', triggers: ['<fn='],
          tags: [{ type: 'tag', begin: '<fn=a>', content: { type: 'json_schema', json_schema: schema }, end: '</fn>' }] } }) });
      const format = { type: 'tag', begin: '<a>', content: { type: 'regex', pattern: '[0-9]+' }, end: '</a>' };
      const tag = { type: 'structural_tag', tag: JSON.stringify({ type: 'structural_tag', format }) };
      assert.deepEqual(await specOf(path, { response_format: { type: 'structural_tag', format } }), tag);
      assert.deepEqual(await specOf(path, { structured_outputs: { structural_tag: JSON.stringify({ format }) } }), tag);
      assert.equal(await specOf(path, {}), null);
    }
  });

  it('refuses malformed, conflicting, unsupported or uncompilable constraints with a 400, and serves the next request', async () => {
    const cases: [Record<string, unknown>, string, RegExp][] = [
      [{ response_format: 'json' }, 'response_format', /must be an object/],
      [{ response_format: { type: 'xml' } }, 'response_format.type', /"text", "json_object", "json_schema" or "structural_tag"/],
      [{ response_format: { type: 'json_schema', json_schema: { name: 'x' } } }, 'response_format.json_schema.schema', /is required/],
      [{ response_format: { type: 'json_schema', json_schema: { schema: 'nope' } } }, 'response_format.json_schema.schema', /JSON schema/],
      [{ structured_outputs: { structural_tag: 'nope' } }, 'structured_outputs.structural_tag', /structural tag object/],
      [{ response_format: { type: 'structural_tag', triggers: ['<'] } }, 'response_format.structures', /non-empty list/],
      [{ response_format: { type: 'structural_tag', triggers: ['<'], structures: [{ begin: '<a>', end: '</a>' }] } },
        'response_format.structures[0]', /"schema": object/],
      [{ response_format: { type: 'structural_tag', triggers: ['<b'], structures: [{ begin: '<a>', schema, end: '</a>' }] } },
        'response_format.structures[0].begin', /must start with one of `triggers`/],
      [{ response_format: { type: 'structural_tag', format: { type: 'tag', begin: '<a>', content: { type: 'regex', pattern: '[' }, end: '' } } },
        'response_format', /does not compile to a grammar/],
      [{ structured_outputs: { regex: '[a' } }, 'structured_outputs.regex', /does not compile to a grammar: Regex parsing error at position 3: Unclosed '\['/],
      [{ guided_grammar: 'root ::= "a" |' }, 'guided_grammar', /does not compile to a grammar: EBNF parser error/],
      [{ structured_outputs: { grammar: 7 } }, 'structured_outputs.grammar', /non-empty string/],
      [{ structured_outputs: { choice: [] } }, 'structured_outputs.choice', /non-empty list/],
      [{ structured_outputs: { json: schema, choice: ['a'] } }, 'structured_outputs', /one of `json`, `regex`, `choice`, `grammar` or `structural_tag`/],
      [{ response_format: { type: 'json_object' }, guided_choice: ['a'] }, 'guided_choice', /Only one structured-output constraint/],
      [{ guided_json: { type: 'object', properties: { a: { $ref: '#/nowhere' } } } }, 'guided_json', /does not compile to a grammar: .*Cannot find field nowhere/],
    ];
    for (const [extra, param, message] of cases) {
      const r = await postJson(`${s.url}/v1/chat/completions`, { messages: [{ role: 'user', content: 'q' }], ...extra });
      assert.equal(r.status, 400, JSON.stringify(extra));
      assert.equal(r.json.error.param, param, JSON.stringify(r.json));
      assert.match(r.json.error.message, message);
    }
    const ok = await postJson(`${s.url}/v1/chat/completions`, { messages: [{ role: 'user', content: 'q' }], max_tokens: 2 });
    assert.equal(ok.status, 200);
  });
});
