// Tool calling through the server, as vLLM: tools and earlier tool calls reach the chat template; tool_choice is
// checked (400s name the field); with --enable-auto-tool-choice --tool-call-parser hermes a model's
// <tool_call> blocks come back as OpenAI tool_calls, streamed or not.

import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { createServer } from '../../src/api/server.js';
import { FakeEngine } from './helpers/fake-engine.js';
import { ByteTokenizer } from './helpers/fake-tokenizer.js';
import { MODEL, postJson, startTestServer, type TestServer } from './helpers/start.js';

const TOOLS_TEMPLATE = '{{ bos_token }}{% if tools %}<|system|>{% for t in tools %}{{ t | tojson }}\n{% endfor %}{% endif %}'
  + '{% for m in messages %}<|{{ m.role }}|>{% if m.reasoning_content %}[{{ m.reasoning_content }}]{% endif %}{{ m.content }}{% for c in m.tool_calls or [] %}<tool_call>{{ c.function.name }} '
  + '{{ c.function.arguments | tojson }}</tool_call>{% endfor %}{% if m.tool_call_id %} ({{ m.tool_call_id }}){% endif %}'
  + '{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}';

const weather = {
  type: 'function' as const,
  function: { name: 'get_weather', description: 'Weather in a city', parameters: { type: 'object', properties: { city: { type: 'string' } } } },
};
const SCRIPT = 'Let me check.<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
  + '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome"}}\n</tool_call>';

describe('tools and tool_choice', () => {
  let s: TestServer;
  const tok = new ByteTokenizer();
  before(async () => {
    s = await startTestServer({ chatTemplate: TOOLS_TEMPLATE, maxModelLen: 1024 }, { script: () => SCRIPT });
  });
  after(() => s.close());

  it('renders the tools, an earlier turn\'s thinking and tool calls (arguments as objects), and tool answers', async () => {
    const r = await postJson(`${s.url}/tokenize`, {
      tools: [weather], tool_choice: 'none',
      messages: [
        { role: 'user', content: 'Weather?' },
        { role: 'assistant', content: null, reasoning_content: 'Oslo, then.', tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city": "Oslo"}' } }] },
        { role: 'tool', tool_call_id: 'call_1', content: 'cold' },
      ],
    });
    assert.equal(r.status, 200, JSON.stringify(r.json));
    assert.equal(tok.decode(r.json.tokens), '<bos><|system|>' + JSON.stringify(weather).replace(/([,:])/g, '$1 ') + '\n'
      + '<|user|>Weather?<|assistant|>[Oslo, then.]<tool_call>get_weather {"city": "Oslo"}</tool_call><|tool|>cold (call_1)<|assistant|>');
  });

  it('refuses what it cannot honour with a 400 naming the field, and serves the next request', async () => {
    const cases: [Record<string, unknown>, string, RegExp][] = [
      [{ tools: {} }, 'tools', /list of tools/],
      [{ tools: [{ type: 'function', function: {} }] }, 'tools[0].function.name', /non-empty string/],
      [{ tools: [{ type: 'retrieval' }] }, 'tools[0]', /"type": "function"/],
      [{ tools: [weather] }, 'tool_choice', /"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser/],
      [{ tools: [weather], tool_choice: 'required', response_format: { type: 'json_object' } }, 'tool_choice', /cannot be combined/],
      [{ tools: [{ type: 'function', function: { name: 'f', parameters: { $ref: '#/nowhere' } } }], tool_choice: 'required' }, 'tools', /does not compile/],
      [{ tools: [weather], tool_choice: { type: 'function', function: { name: 'nope' } } }, 'tool_choice', /"nope", which is not in `tools`/],
      [{ tool_choice: 'auto' }, 'tool_choice', /requires `tools`/],
      [{ tool_choice: 'sometimes', tools: [weather] }, 'tool_choice', /must be "none", "auto"/],
      [{ messages: [{ role: 'assistant', content: '', tool_calls: [{ type: 'function', function: { name: 'f', arguments: '{' } }] }] },
        'messages[0].tool_calls[0].function.arguments', /JSON object/],
      [{ messages: [{ role: 'tool', content: 'x', tool_call_id: 7 }] }, 'messages[0].tool_call_id', /must be a string/],
      [{ messages: [{ role: 'assistant', content: 'x', reasoning_content: ['a'] }] }, 'messages[0].reasoning_content', /must be a string/],
    ];
    for (const [extra, param, message] of cases) {
      const r = await postJson(`${s.url}/v1/chat/completions`, { messages: [{ role: 'user', content: 'hi' }], max_tokens: 2, ...extra });
      assert.equal(r.status, 400, JSON.stringify(extra));
      assert.equal(r.json.error.param, param);
      assert.match(r.json.error.message, message);
    }
    const ok = await postJson(`${s.url}/v1/chat/completions`, { messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 });
    assert.equal(ok.status, 200);
  });

  it('with tool_choice "none" the output stays text, tags and all', async () => {
    const r = await postJson(`${s.url}/v1/chat/completions`, { messages: [{ role: 'user', content: 'hi' }], tools: [weather], tool_choice: 'none' });
    assert.equal(r.status, 200);
    assert.equal(r.json.choices[0].message.content, SCRIPT);
    assert.equal(r.json.choices[0].message.tool_calls, undefined);
    assert.equal(r.json.choices[0].finish_reason, 'stop');
  });
});

describe('auto tool choice with the hermes parser', () => {
  let s: TestServer;
  let client: OpenAI;
  before(async () => {
    s = await startTestServer({ enableAutoToolChoice: true, toolCallParser: 'hermes' }, { script: () => SCRIPT });
    client = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: 'unused', maxRetries: 0 });
  });
  after(() => s.close());
  const messages = [{ role: 'user' as const, content: 'Weather in Paris and Rome?' }];

  it('answers the calls as tool_calls with the text before them as content, finish_reason tool_calls', async () => {
    const r = await client.chat.completions.create({ model: MODEL, messages, tools: [weather] });
    const m = r.choices[0]!.message;
    assert.equal(m.content, 'Let me check.');
    assert.equal(r.choices[0]!.finish_reason, 'tool_calls');
    assert.deepEqual(m.tool_calls!.map((c) => c.type === 'function' ? [c.function.name, JSON.parse(c.function.arguments)] : null),
      [['get_weather', { city: 'Paris' }], ['get_weather', { city: 'Rome' }]]);
    for (const c of m.tool_calls!) assert.match(c.id, /^chatcmpl-tool-[0-9a-f]{32}$/);
    assert.notEqual(m.tool_calls![0]!.id, m.tool_calls![1]!.id);
    assert.equal(s.engine.submitted.at(-1)!.sampling.skipSpecialTokens, false);
  });

  it('streams the content as it comes and each call whole, indexed, and ends with finish_reason tool_calls', async () => {
    const stream = await client.chat.completions.create({ model: MODEL, messages, tools: [weather], stream: true });
    let content = '';
    const calls: { index: number; id?: string; name?: string; arguments?: string }[] = [];
    const finish: (string | null)[] = [];
    for await (const chunk of stream) {
      const c = chunk.choices[0]!;
      content += c.delta.content ?? '';
      for (const t of c.delta.tool_calls ?? []) calls.push({ index: t.index, id: t.id, name: t.function?.name, arguments: t.function?.arguments });
      if (c.finish_reason) finish.push(c.finish_reason);
    }
    assert.equal(content, 'Let me check.');
    assert.deepEqual(calls.map((c) => [c.index, c.name, JSON.parse(c.arguments!)]),
      [[0, 'get_weather', { city: 'Paris' }], [1, 'get_weather', { city: 'Rome' }]]);
    assert.deepEqual(finish, ['tool_calls']);
  });

  it('parses nothing when the request sends no tools', async () => {
    const r = await client.chat.completions.create({ model: MODEL, messages });
    assert.equal(r.choices[0]!.message.content, SCRIPT);
    assert.equal(r.choices[0]!.finish_reason, 'stop');
  });

  it('refuses to start with --enable-auto-tool-choice and no parser', () => {
    assert.throws(() => createServer({ engine: new FakeEngine(), tokenizer: new ByteTokenizer(), chatTemplate: null, modelName: MODEL,
      maxModelLen: 64, enableAutoToolChoice: true }), /--enable-auto-tool-choice requires --tool-call-parser/);
  });
});

describe('forced tool choice (a named function, or "required")', () => {
  let s: TestServer;
  let client: OpenAI;
  let script = '';
  before(async () => {
    s = await startTestServer({}, { script: () => script });
    client = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: 'unused', maxRetries: 0 });
  });
  after(() => s.close());
  const messages = [{ role: 'user' as const, content: 'Weather?' }];
  const search = { type: 'function' as const, function: { name: 'search', parameters: { type: 'object', properties: { q: { type: 'string' } } } } };
  const named = { type: 'function' as const, function: { name: 'get_weather' } };

  it('constrains the output to the named function\'s arguments and answers them as its call, streamed as they come', async () => {
    script = '{"city": "Paris"}';
    const r = await client.chat.completions.create({ model: MODEL, messages, tools: [weather, search], tool_choice: named });
    assert.deepEqual(s.engine.submitted.at(-1)!.sampling.structuredOutput, { type: 'json', schema: JSON.stringify(weather.function.parameters) });
    const m = r.choices[0]!.message;
    assert.equal(m.content, null);
    assert.deepEqual(m.tool_calls!.map((c) => c.type === 'function' ? [c.function.name, c.function.arguments] : null), [['get_weather', script]]);
    assert.equal(r.choices[0]!.finish_reason, 'stop');
    const stream = await client.chat.completions.create({ model: MODEL, messages, tools: [weather], tool_choice: named, stream: true });
    let args = '';
    const heads: (string | undefined)[] = [];
    for await (const c of stream) {
      for (const t of c.choices[0]?.delta.tool_calls ?? []) {
        assert.equal(t.index, 0);
        args += t.function?.arguments ?? '';
        heads.push(t.function?.name);
      }
    }
    assert.equal(args, script);
    assert.equal(heads[0], 'get_weather');
    assert.ok(heads.length > 1 && heads.slice(1).every((n) => n === undefined));
  });

  it('"required" constrains the output to a list of calls and answers each as a tool call, streamed as it comes or not', async () => {
    script = '[{"name": "search", "parameters": {"q": "rain"}}, {"name": "get_weather", "parameters": {"city": "Rome"}}]';
    const r = await client.chat.completions.create({ model: MODEL, messages, tools: [weather, search], tool_choice: 'required' });
    const spec = s.engine.submitted.at(-1)!.sampling.structuredOutput!;
    assert.equal(spec.type, 'json');
    const schema = JSON.parse((spec as { schema: string }).schema);
    assert.equal(schema.type, 'array');
    assert.deepEqual(schema.items.anyOf.map((a: { properties: { name: { enum: string[] } } }) => a.properties.name.enum), [['get_weather'], ['search']]);
    const calls = (m: OpenAI.Chat.Completions.ChatCompletionMessage) => m.tool_calls!.map((c) => c.type === 'function' ? [c.function.name, JSON.parse(c.function.arguments)] : null);
    assert.deepEqual(calls(r.choices[0]!.message), [['search', { q: 'rain' }], ['get_weather', { city: 'Rome' }]]);
    assert.equal(r.choices[0]!.finish_reason, 'tool_calls');
    const stream = await client.chat.completions.create({ model: MODEL, messages, tools: [weather, search], tool_choice: 'required', stream: true });
    const got: [number, string | undefined, string][] = [];
    let finish = null;
    let chunks = 0;
    for await (const c of stream) {
      for (const t of c.choices[0]?.delta.tool_calls ?? []) {
        chunks++;
        if (t.function?.name !== undefined) got[t.index] = [t.index, t.function.name, ''];
        got[t.index]![2] += t.function?.arguments ?? '';
      }
      finish = c.choices[0]?.finish_reason ?? finish;
    }
    assert.deepEqual(got.map(([i, name, args]) => [i, name, JSON.parse(args)]), [[0, 'search', { q: 'rain' }], [1, 'get_weather', { city: 'Rome' }]]);
    assert.ok(chunks > 4, `each call's arguments streamed as they came (${chunks} tool_call deltas)`);
    assert.equal(finish, 'tool_calls');
  });
});

describe('auto tool choice with the llama3_json parser', () => {
  let s: TestServer;
  let client: OpenAI;
  before(async () => {
    s = await startTestServer({ enableAutoToolChoice: true, toolCallParser: 'llama3_json' },
      { script: () => '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Oslo"}}' });
    client = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: 'unused', maxRetries: 0 });
  });
  after(() => s.close());

  it('answers a Llama 3 JSON call as a tool call, streamed or not', async () => {
    const messages = [{ role: 'user' as const, content: 'Weather in Oslo?' }];
    const r = await client.chat.completions.create({ model: MODEL, messages, tools: [weather] });
    assert.equal(r.choices[0]!.message.content, null);
    const call = r.choices[0]!.message.tool_calls![0]!;
    assert.deepEqual(call.type === 'function' ? [call.function.name, JSON.parse(call.function.arguments)] : null, ['get_weather', { city: 'Oslo' }]);
    assert.equal(r.choices[0]!.finish_reason, 'tool_calls');
    const stream = await client.chat.completions.create({ model: MODEL, messages, tools: [weather], stream: true });
    const names: (string | undefined)[] = [];
    let finish = null;
    for await (const c of stream) {
      for (const t of c.choices[0]?.delta.tool_calls ?? []) names.push(t.function?.name);
      finish = c.choices[0]?.finish_reason ?? finish;
    }
    assert.deepEqual([names, finish], [['get_weather'], 'tool_calls']);
  });
});

describe('auto tool choice with the mistral parser', () => {
  let s: TestServer;
  let client: OpenAI;
  before(async () => {
    s = await startTestServer({ enableAutoToolChoice: true, toolCallParser: 'mistral' },
      { script: () => 'Checking. [TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Oslo"}}]' });
    client = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: 'unused', maxRetries: 0 });
  });
  after(() => s.close());

  it('answers [TOOL_CALLS] as tool calls with Mistral\'s 9-character ids, streamed or not', async () => {
    const messages = [{ role: 'user' as const, content: 'Weather in Oslo?' }];
    const r = await client.chat.completions.create({ model: MODEL, messages, tools: [weather] });
    assert.equal(r.choices[0]!.message.content, 'Checking. ');
    const call = r.choices[0]!.message.tool_calls![0]!;
    assert.deepEqual(call.type === 'function' ? [call.function.name, JSON.parse(call.function.arguments)] : null, ['get_weather', { city: 'Oslo' }]);
    assert.match(call.id, /^[a-zA-Z0-9]{9}$/);
    assert.equal(r.choices[0]!.finish_reason, 'tool_calls');
    const stream = await client.chat.completions.create({ model: MODEL, messages, tools: [weather], stream: true });
    let content = '';
    const ids: (string | undefined)[] = [];
    let finish = null;
    for await (const c of stream) {
      content += c.choices[0]?.delta.content ?? '';
      for (const t of c.choices[0]?.delta.tool_calls ?? []) ids.push(t.id);
      finish = c.choices[0]?.finish_reason ?? finish;
    }
    assert.equal(content, 'Checking. ');
    assert.equal(ids.length, 1);
    assert.match(ids[0]!, /^[a-zA-Z0-9]{9}$/);
    assert.equal(finish, 'tool_calls');
  });
});
