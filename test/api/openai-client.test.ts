import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { FakeEngine } from './helpers/fake-engine.js';
import { ByteTokenizer } from './helpers/fake-tokenizer.js';
import { MODEL, startTestServer, type TestServer } from './helpers/start.js';
import { defaultSamplingParams } from '../../src/sampling/params.js';
import type { EngineRequest } from '../../src/engine/types.js';

const tok = new ByteTokenizer();

function greedyText(promptIds: number[], numTokens: number): string {
  const req: EngineRequest = {
    requestId: 'x', promptTokenIds: promptIds, sampling: defaultSamplingParams({ temperature: 0 }),
    priority: 0, cacheSalt: null, arrivalTime: 0,
  };
  return tok.decode(Array.from({ length: numTokens }, (_, i) => FakeEngine.tokenAt(req, i)));
}

const chatPrompt = (user: string) => tok.encode(`<bos><|user|>${user}\n<|assistant|>`, { addSpecialTokens: false });

describe('OpenAI client against the server', () => {
  let s: TestServer;
  let client: OpenAI;
  before(async () => {
    s = await startTestServer();
    client = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: 'unused', maxRetries: 0 });
  });
  after(() => s.close());

  it('completes a prompt greedily with usage in OpenAI shape', async () => {
    const r = await client.completions.create({ model: MODEL, prompt: 'Hello', max_tokens: 8, temperature: 0 });
    assert.match(r.id, /^cmpl-/);
    assert.equal(r.object, 'text_completion');
    assert.equal(r.model, MODEL);
    assert.equal(r.choices.length, 1);
    assert.equal(r.choices[0]!.text, greedyText(tok.encode('Hello'), 8));
    assert.equal(r.choices[0]!.finish_reason, 'length');
    assert.deepEqual(r.usage, { prompt_tokens: 6, completion_tokens: 8, total_tokens: 14, prompt_tokens_details: { cached_tokens: 0 } });
  });

  it('streams the same text as the non-streamed answer at temperature 0, with a usage chunk', async () => {
    const full = await client.completions.create({ model: MODEL, prompt: 'stream me', max_tokens: 12, temperature: 0 });
    const stream = await client.completions.create({
      model: MODEL, prompt: 'stream me', max_tokens: 12, temperature: 0, stream: true, stream_options: { include_usage: true },
    });
    let text = '';
    let usage: OpenAI.CompletionUsage | undefined;
    let finish: string | null = null;
    for await (const chunk of stream) {
      if (chunk.choices.length === 0) usage = chunk.usage ?? undefined;
      for (const c of chunk.choices) {
        text += c.text;
        finish ??= c.finish_reason;
      }
    }
    assert.equal(text, full.choices[0]!.text);
    assert.equal(finish, 'length');
    assert.equal(usage?.completion_tokens, 12);
    assert.equal(usage?.prompt_tokens, full.usage?.prompt_tokens);
  });

  it('renders the chat template and answers as chat.completion, streamed or not', async () => {
    const messages = [{ role: 'user' as const, content: 'hi there' }];
    const r = await client.chat.completions.create({ model: MODEL, messages, max_tokens: 10, temperature: 0 });
    assert.match(r.id, /^chatcmpl-/);
    assert.equal(r.object, 'chat.completion');
    assert.equal(r.choices[0]!.message.role, 'assistant');
    assert.equal(r.choices[0]!.message.content, greedyText(chatPrompt('hi there'), 10));
    assert.equal(r.usage?.prompt_tokens, chatPrompt('hi there').length);

    const stream = await client.chat.completions.create({ model: MODEL, messages, max_tokens: 10, temperature: 0, stream: true });
    let text = '';
    let role: string | undefined;
    for await (const chunk of stream) {
      assert.equal(chunk.object, 'chat.completion.chunk');
      for (const c of chunk.choices) {
        role ??= c.delta.role;
        text += c.delta.content ?? '';
      }
    }
    assert.equal(role, 'assistant');
    assert.equal(text, r.choices[0]!.message.content);
  });

  it('accepts content-part arrays in chat messages', async () => {
    const r = await client.chat.completions.create({
      model: MODEL, messages: [{ role: 'user', content: [{ type: 'text', text: 'a' }, { type: 'text', text: 'b' }] }],
      max_tokens: 4, temperature: 0,
    });
    assert.equal(r.choices[0]!.message.content, greedyText(chatPrompt('a\nb'), 4));
  });

  it('n > 1 submits n engine requests with seeds derived from the seed', async () => {
    const before = s.engine.submitted.length;
    const a = await client.completions.create({ model: MODEL, prompt: 'seeded', max_tokens: 16, temperature: 1, n: 3, seed: 42 });
    const b = await client.completions.create({ model: MODEL, prompt: 'seeded', max_tokens: 16, temperature: 1, n: 3, seed: 42 });
    assert.deepEqual(a.choices.map((c) => c.index), [0, 1, 2]);
    assert.deepEqual(a.choices.map((c) => c.text), b.choices.map((c) => c.text));
    assert.equal(new Set(a.choices.map((c) => c.text)).size, 3);
    assert.deepEqual(s.engine.submitted.slice(before, before + 3).map((r) => r.sampling.seed), [42, 43, 44]);
    assert.equal(a.usage?.completion_tokens, 48);
    assert.equal(a.usage?.prompt_tokens, tok.encode('seeded').length);
  });

  it('serves a batch of prompts (strings and token ids) with choice index prompt * n + i', async () => {
    const ids = tok.encode('xyz');
    const r = await client.completions.create({ model: MODEL, prompt: [ids, tok.encode('uv')], max_tokens: 3, temperature: 0, n: 2 });
    assert.deepEqual(r.choices.map((c) => c.index), [0, 1, 2, 3]);
    assert.equal(r.choices[0]!.text, greedyText(ids, 3));
    assert.equal(r.choices[3]!.text, greedyText(tok.encode('uv'), 3));
    assert.equal(r.usage?.prompt_tokens, ids.length + tok.encode('uv').length);
  });

  it('returns completion logprobs with the top alternatives', async () => {
    const r = await client.completions.create({ model: MODEL, prompt: 'lp', max_tokens: 5, temperature: 0, logprobs: 3 });
    const lp = r.choices[0]!.logprobs!;
    assert.equal(lp.tokens!.length, 5);
    assert.equal(lp.tokens!.join(''), r.choices[0]!.text);
    assert.deepEqual(lp.text_offset, [0, 1, 2, 3, 4]);
    for (let i = 0; i < 5; i++) {
      const top = lp.top_logprobs![i]!;
      assert.equal(Object.keys(top).length, 3);
      assert.equal(top[lp.tokens![i]!], lp.token_logprobs![i]);
    }
  });

  it('returns chat logprobs with top_logprobs', async () => {
    const r = await client.chat.completions.create({
      model: MODEL, messages: [{ role: 'user', content: 'q' }], max_tokens: 4, temperature: 0, logprobs: true, top_logprobs: 2,
    });
    const content = r.choices[0]!.logprobs!.content!;
    assert.equal(content.length, 4);
    assert.equal(content.map((c) => c.token).join(''), r.choices[0]!.message.content);
    for (const c of content) {
      assert.equal(c.top_logprobs.length, 2);
      assert.deepEqual(c.bytes, Array.from(Buffer.from(c.token)));
    }
  });

  it('ends at a stop string, aborting the engine request', async () => {
    const full = greedyText(tok.encode('stops'), 40);
    const stop = full.slice(10, 12);
    const cut = full.indexOf(stop);
    const r = await client.completions.create({ model: MODEL, prompt: 'stops', max_tokens: 40, temperature: 0, stop: [stop, 'QQQ'] });
    assert.equal(r.choices[0]!.text, full.slice(0, cut));
    assert.equal(r.choices[0]!.finish_reason, 'stop');
    assert.ok(s.engine.abortedIds.some((id) => r.id.length > 0 && id.startsWith(r.id)));
    const kept = await client.completions.create({
      model: MODEL, prompt: 'stops', max_tokens: 40, temperature: 0, stop, include_stop_str_in_output: true,
    } as unknown as OpenAI.CompletionCreateParamsNonStreaming);
    assert.equal(kept.choices[0]!.text, full.slice(0, cut + stop.length));
  });

  it('echoes the prompt', async () => {
    const r = await client.completions.create({ model: MODEL, prompt: 'echo', max_tokens: 3, temperature: 0, echo: true });
    assert.equal(r.choices[0]!.text, 'echo' + greedyText(tok.encode('echo'), 3));
  });

  it('lists the served model', async () => {
    const models = await client.models.list();
    assert.deepEqual(models.data.map((m) => m.id), [MODEL]);
  });
});

describe('EOS and stop token ids', () => {
  let s: TestServer;
  before(async () => (s = await startTestServer({}, { eosAfter: 5 })));
  after(() => s.close());

  it('finishes with stop at EOS and leaves the special token out of the text', async () => {
    const client = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: 'unused', maxRetries: 0 });
    const r = await client.completions.create({ model: MODEL, prompt: 'eos', max_tokens: 50, temperature: 0 });
    assert.equal(r.choices[0]!.finish_reason, 'stop');
    assert.equal(r.choices[0]!.text, greedyText(tok.encode('eos'), 5));
    assert.equal(r.usage?.completion_tokens, 6);
    assert.equal((r.choices[0] as unknown as { stop_reason: unknown }).stop_reason, null);
    const stopId = FakeEngine.tokenAt(s.engine.submitted.at(-1)!, 2);
    const byToken = await client.completions.create({
      model: MODEL, prompt: 'eos', max_tokens: 50, temperature: 0, stop_token_ids: [stopId],
    } as unknown as OpenAI.CompletionCreateParamsNonStreaming);
    const firstStop = [0, 1, 2].find((i) => FakeEngine.tokenAt(s.engine.submitted.at(-1)!, i) === stopId)!;
    assert.equal(byToken.choices[0]!.finish_reason, 'stop');
    assert.equal((byToken.choices[0] as unknown as { stop_reason: unknown }).stop_reason, stopId);
    assert.equal(byToken.choices[0]!.text, greedyText(tok.encode('eos'), firstStop));
    assert.equal(byToken.usage?.completion_tokens, firstStop + 1);
    const ignored = await client.completions.create({
      model: MODEL, prompt: 'eos', max_tokens: 9, temperature: 0, ignore_eos: true,
    } as unknown as OpenAI.CompletionCreateParamsNonStreaming);
    assert.equal(ignored.choices[0]!.finish_reason, 'length');
    assert.equal(ignored.choices[0]!.text, greedyText(tok.encode('eos'), 9));
  });
});
