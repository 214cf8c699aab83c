// /v1/responses (OpenAI's Responses API, stateless): the official client's create and stream, instructions and
// message input through the chat template, max_output_tokens as an incomplete response, text.format as a
// structured output, and 400s naming the field. Tools: responses-tools.test.ts.

import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { ByteTokenizer } from './helpers/fake-tokenizer.js';
import { MODEL, postJson, startTestServer, type TestServer } from './helpers/start.js';

describe('/v1/responses', () => {
  let s: TestServer;
  let client: OpenAI;
  const tok = new ByteTokenizer();
  before(async () => {
    s = await startTestServer({ maxModelLen: 512 }, { script: () => 'Calm seas.' });
    client = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: 'unused', maxRetries: 0 });
  });
  after(() => s.close());

  it('answers a string input with instructions as a completed message, with usage', async () => {
    const r = await client.responses.create({ model: MODEL, input: 'How is the sea?', instructions: 'Be brief.' });
    assert.match(r.id, /^resp_/);
    assert.equal(r.status, 'completed');
    assert.equal(r.output_text, 'Calm seas.');
    assert.equal(r.output[0]!.type, 'message');
    const prompt = s.engine.submitted.at(-1)!.promptTokenIds;
    assert.equal(tok.decode(prompt), '<bos><|system|>Be brief.\n<|user|>How is the sea?\n<|assistant|>');
    assert.deepEqual(r.usage && [r.usage.input_tokens, r.usage.output_tokens, r.usage.total_tokens], [prompt.length, 11, prompt.length + 11]);
  });

  it('takes message input with text parts, developer as system', async () => {
    await client.responses.create({ model: MODEL, input: [
      { role: 'developer', content: 'Rules.' },
      { role: 'user', content: [{ type: 'input_text', text: 'a' }, { type: 'input_text', text: 'b' }] },
    ] });
    assert.equal(tok.decode(s.engine.submitted.at(-1)!.promptTokenIds), '<bos><|system|>Rules.\n<|user|>a\nb\n<|assistant|>');
  });

  it('streams typed events in order, the deltas adding up to the text', async () => {
    const stream = await client.responses.create({ model: MODEL, input: 'sea?', stream: true });
    const types: string[] = [];
    let text = '';
    let seq = -1;
    let completed: OpenAI.Responses.Response | null = null;
    for await (const e of stream) {
      types.push(e.type);
      assert.equal(e.sequence_number, seq + 1);
      seq = e.sequence_number;
      if (e.type === 'response.output_text.delta') text += e.delta;
      if (e.type === 'response.completed') completed = e.response;
    }
    assert.deepEqual([...new Set(types)], ['response.created', 'response.in_progress', 'response.output_item.added',
      'response.content_part.added', 'response.output_text.delta', 'response.output_text.done', 'response.content_part.done',
      'response.output_item.done', 'response.completed']);
    assert.equal(text, 'Calm seas.');
    const message = completed!.output[0] as OpenAI.Responses.ResponseOutputMessage;
    assert.deepEqual(message.content.map((c) => c.type === 'output_text' ? c.text : null), ['Calm seas.']);
    assert.equal(completed!.status, 'completed');
    const raw = await fetch(`${s.url}/v1/responses`, { method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ input: 'x', stream: true }) });
    const body = await raw.text();
    assert.match(body, /^event: response\.created\ndata: \{/);
    assert.match(body, /\nevent: response\.completed\ndata: \{/, 'the last event names its type too');
    assert.doesNotMatch(body, /\[DONE\]/);
  });

  it('marks a response cut by max_output_tokens incomplete', async () => {
    const r = await client.responses.create({ model: MODEL, input: 'sea?', max_output_tokens: 4 });
    assert.equal(r.status, 'incomplete');
    assert.deepEqual(r.incomplete_details, { reason: 'max_output_tokens' });
    assert.equal(r.output_text, 'Calm');
  });

  it('gives output_text logprobs with include ["message.output_text.logprobs"], top_logprobs alternatives each', async () => {
    const body = { model: MODEL, input: 'sea?', top_logprobs: 2, include: ['message.output_text.logprobs' as const] };
    const r = await client.responses.create(body);
    assert.equal(s.engine.submitted.at(-1)!.sampling.logprobs, 2);
    assert.equal(r.top_logprobs, 2);
    const text = (r.output[0] as OpenAI.Responses.ResponseOutputMessage).content[0] as OpenAI.Responses.ResponseOutputText;
    const lps = text.logprobs!;
    assert.equal(lps.length, 11, 'one per generated token (the 10 bytes, then EOS)');
    assert.equal(lps.slice(0, 10).map((l) => l.token).join(''), 'Calm seas.');
    for (const l of lps) {
      assert.equal(l.top_logprobs.length, 2);
      assert.deepEqual(l.bytes, [...Buffer.from(l.token)]);
    }
    const stream = await client.responses.create({ ...body, stream: true });
    const streamed: string[] = [];
    let done: string[] = [];
    for await (const e of stream) {
      if (e.type === 'response.output_text.delta') streamed.push(...e.logprobs.map((l) => l.token));
      if (e.type === 'response.output_text.done') done = e.logprobs!.map((l) => l.token);
    }
    assert.equal(streamed.join(''), 'Calm seas.');
    assert.deepEqual(done, streamed);
    const plain = await client.responses.create({ model: MODEL, input: 'sea?', top_logprobs: 2 });
    assert.equal(s.engine.submitted.at(-1)!.sampling.logprobs, null, 'top_logprobs alone computes none');
    assert.equal(((plain.output[0] as OpenAI.Responses.ResponseOutputMessage).content[0] as { logprobs?: unknown }).logprobs, undefined);
  });

  it('hands text.format to the engine as a structured output', async () => {
    const schema = { type: 'object', properties: { a: { type: 'integer' } } };
    await client.responses.create({ model: MODEL, input: 'x', text: { format: { type: 'json_schema', name: 'a', schema } } });
    assert.deepEqual(s.engine.submitted.at(-1)!.sampling.structuredOutput, { type: 'json', schema: JSON.stringify(schema) });
  });

  it('refuses stored state, bad tools and bad input with a 400 naming the field', async () => {
    const cases: [Record<string, unknown>, string][] = [
      [{ input: 'x', previous_response_id: 'resp_1' }, 'previous_response_id'],
      [{ input: 'x', tools: [{ type: 'web_search' }] }, 'tools[0]'],
      [{ input: 'x', tools: [{ type: 'function', name: '' }] }, 'tools[0].name'],
      [{ input: 'x', tools: [{ type: 'function', name: 'f' }], tool_choice: { type: 'function', name: 'g' } }, 'tool_choice'],
      [{ input: 'x', tools: [{ type: 'function', name: 'f' }] }, 'tool_choice'],
      [{ input: '' }, 'input'],
      [{ input: [{ type: 'reasoning', summary: [] }] }, 'input[0]'],
      [{ input: [{ type: 'function_call_output', call_id: 'c' }] }, 'input[0]'],
      [{ input: [{ role: 'user', content: [{ type: 'input_image', image_url: 'x' }] }] }, 'input[0].content[0]'],
      [{ input: 'x', max_output_tokens: 0 }, 'max_output_tokens'],
      [{ input: 'x', top_logprobs: 21 }, 'top_logprobs'],
      [{ input: 'x', include: ['message.output_text.logprob'] }, 'include'],
      [{ input: 'x', include: 'message.output_text.logprobs' }, 'include'],
    ];
    for (const [body, param] of cases) {
      const r = await postJson(`${s.url}/v1/responses`, body);
      assert.equal(r.status, 400, JSON.stringify(body));
      assert.equal(r.json.error.param, param);
    }
  });
});
