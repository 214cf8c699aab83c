// /v1/responses with tools, as vLLM: flat function tools and a tool round trip (function_call and
// function_call_output input items) reach the chat template; "auto" calls come back as function_call output items
// (with a reasoning item under --reasoning-parser), streamed as typed events; "required" and named choices are
// forced by a grammar and answered as calls, their arguments streamed as they are written.

import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { ByteTokenizer } from './helpers/fake-tokenizer.js';
import { MODEL, startTestServer, type TestServer } from './helpers/start.js';

const TEMPLATE = '{{ bos_token }}{% if tools %}<|system|>{% for t in tools %}{{ t | tojson }}\n{% endfor %}{% endif %}'
  + '{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{% for c in m.tool_calls or [] %}<tool_call>{{ c.id }} '
  + '{{ c.function.name }} {{ c.function.arguments | tojson }}</tool_call>{% endfor %}'
  + '{% if m.tool_call_id %} ({{ m.tool_call_id }}){% endif %}{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}';

const weather = { type: 'function' as const, name: 'get_weather', description: 'Weather in a city', strict: false,
  parameters: { type: 'object', properties: { city: { type: 'string' } } } };
const SCRIPT = '<think>Two cities.</think>Let me check.<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n'
  + '</tool_call>\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome"}}\n</tool_call>';

type Item = OpenAI.Responses.ResponseOutputItem;
const shapeOf = (items: Item[]) => items.map((i) => i.type === 'function_call' ? ['function_call', i.name, JSON.parse(i.arguments)]
  : i.type === 'message' ? ['message', i.content.map((c) => c.type === 'output_text' ? c.text : null).join('')]
    : i.type === 'reasoning' ? ['reasoning', (i.content ?? []).map((c) => c.text).join('')] : [i.type]);

describe('/v1/responses with tools', () => {
  let s: TestServer;
  let client: OpenAI;
  let script = SCRIPT;
  const tok = new ByteTokenizer();
  before(async () => {
    s = await startTestServer({ chatTemplate: TEMPLATE, maxModelLen: 1024, enableAutoToolChoice: true, toolCallParser: 'hermes',
      reasoningParser: 'qwen3' }, { script: () => script });
    client = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: 'unused', maxRetries: 0 });
  });
  after(() => s.close());

  it('hands the tools and a tool round trip to the chat template', async () => {
    script = 'Sunny.';
    const r = await client.responses.create({ model: MODEL, tools: [weather], input: [
      { role: 'user', content: 'Weather in Paris?' },
      { type: 'function_call', call_id: 'call_1', name: 'get_weather', arguments: '{"city": "Paris"}' },
      { type: 'function_call', call_id: 'call_2', name: 'get_weather', arguments: '{"city": "Rome"}' },
      { type: 'function_call_output', call_id: 'call_1', output: '21 C' },
      { type: 'function_call_output', call_id: 'call_2', output: '25 C' },
    ] });
    assert.equal(r.output_text, 'Sunny.');
    const tools = '{"type": "function", "function": {"name": "get_weather", "description": "Weather in a city", '
      + '"parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}';
    assert.equal(tok.decode(s.engine.submitted.at(-1)!.promptTokenIds), `<bos><|system|>${tools}\n<|user|>Weather in Paris?`
      + '<|assistant|><tool_call>call_1 get_weather {"city": "Paris"}</tool_call><tool_call>call_2 get_weather {"city": "Rome"}</tool_call>'
      + '<|tool|>21 C (call_1)<|tool|>25 C (call_2)<|assistant|>');
    assert.deepEqual(r.tools, [weather]);
  });

  it('answers "auto" calls as function_call items after the reasoning and the message', async () => {
    script = SCRIPT;
    const r = await client.responses.create({ model: MODEL, input: 'Weather in Paris and Rome?', tools: [weather] });
    assert.deepEqual(shapeOf(r.output), [['reasoning', 'Two cities.'], ['message', 'Let me check.'],
      ['function_call', 'get_weather', { city: 'Paris' }], ['function_call', 'get_weather', { city: 'Rome' }]]);
    const calls = r.output.filter((i) => i.type === 'function_call');
    for (const c of calls) assert.match(c.call_id, /^call_[0-9a-f]{24}$/);
    assert.notEqual(calls[0]!.call_id, calls[1]!.call_id);
    assert.equal(r.status, 'completed');
    assert.equal(s.engine.submitted.at(-1)!.sampling.skipSpecialTokens, false);
  });

  it('streams each item as typed events, the completed response holding the same items', async () => {
    script = SCRIPT;
    const stream = await client.responses.create({ model: MODEL, input: 'Weather?', tools: [weather], stream: true });
    const types: string[] = [];
    const args: string[] = [];
    let reasoning = '';
    let text = '';
    let completed: OpenAI.Responses.Response | null = null;
    for await (const e of stream) {
      types.push(e.type);
      if (e.type === 'response.reasoning_text.delta') reasoning += e.delta;
      if (e.type === 'response.output_text.delta') text += e.delta;
      if (e.type === 'response.function_call_arguments.done') args.push(e.arguments);
      if (e.type === 'response.completed') completed = e.response;
    }
    assert.equal(reasoning, 'Two cities.');
    assert.equal(text, 'Let me check.');
    assert.deepEqual(args.map((a) => JSON.parse(a)), [{ city: 'Paris' }, { city: 'Rome' }]);
    assert.deepEqual(types.filter((t) => t.startsWith('response.output_item')), Array(4).fill(['response.output_item.added',
      'response.output_item.done']).flat());
    assert.deepEqual(shapeOf(completed!.output), [['reasoning', 'Two cities.'], ['message', 'Let me check.'],
      ['function_call', 'get_weather', { city: 'Paris' }], ['function_call', 'get_weather', { city: 'Rome' }]]);
    assert.equal(types.at(-1), 'response.completed');
  });

  it('forces "required" and named choices by a grammar and answers the calls', async () => {
    script = '[{"name": "get_weather", "parameters": {"city": "Oslo"}}]';
    const r = await client.responses.create({ model: MODEL, input: 'Weather?', tools: [weather], tool_choice: 'required' });
    assert.deepEqual(shapeOf(r.output), [['function_call', 'get_weather', { city: 'Oslo' }]]);
    assert.equal(s.engine.submitted.at(-1)!.sampling.structuredOutput?.type, 'json');
    const streamed = async (tool_choice: OpenAI.Responses.ResponseCreateParams['tool_choice']) => {
      const stream = await client.responses.create({ model: MODEL, input: 'Weather?', tools: [weather], tool_choice, stream: true });
      let completed: OpenAI.Responses.Response | null = null;
      const deltas: string[] = [];
      for await (const e of stream) {
        if (e.type === 'response.function_call_arguments.delta') deltas.push(e.delta);
        if (e.type === 'response.completed') completed = e.response;
      }
      return { output: shapeOf(completed!.output), deltas };
    };
    const listed = await streamed('required');
    assert.deepEqual(listed.output, [['function_call', 'get_weather', { city: 'Oslo' }]]);
    assert.deepEqual(JSON.parse(listed.deltas.join('')), { city: 'Oslo' });
    assert.ok(listed.deltas.length > 1, 'the arguments stream as they are written');
    script = '{"city": "Oslo"}';
    const named = await streamed({ type: 'function', name: 'get_weather' });
    assert.deepEqual(named.output, [['function_call', 'get_weather', { city: 'Oslo' }]]);
    assert.equal(named.deltas.join(''), script);
    assert.ok(named.deltas.length > 1, 'the arguments stream as they are written');
    const forced = s.engine.submitted.at(-1)!.sampling.structuredOutput;
    assert.deepEqual(forced?.type === 'json' ? JSON.parse(forced.schema) : null, weather.parameters);
  });

  it('leaves the text alone with tool_choice "none"', async () => {
    script = SCRIPT;
    const r = await client.responses.create({ model: MODEL, input: 'Weather?', tools: [weather], tool_choice: 'none' });
    assert.deepEqual(shapeOf(r.output).map((i) => i[0]), ['reasoning', 'message']);
  });
});
