// Prompt logprobs through the API: completions' echo + logprobs (lm-eval's loglikelihood requests: echo, logprobs,
// max_tokens 0 or 1), vLLM's prompt_logprobs field on completions and chat, and their bad values.

import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { FakeEngine } from './helpers/fake-engine.js';
import { ByteTokenizer } from './helpers/fake-tokenizer.js';
import { MODEL, postJson, startTestServer, type TestServer } from './helpers/start.js';

const tok = new ByteTokenizer();
const text = (id: number) => tok.decode([id], { skipSpecialTokens: false });

interface Logprobs {
  tokens: string[];
  token_logprobs: (number | null)[];
  top_logprobs: (Record<string, number> | null)[];
  text_offset: number[];
}

describe('prompt logprobs', () => {
  let s: TestServer;
  let client: OpenAI;
  before(async () => {
    s = await startTestServer();
    client = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: 'unused', maxRetries: 0 });
  });
  after(() => s.close());
  const post = async (path: string, body: unknown) => {
    const r = await postJson(`${s.url}${path}`, body);
    return { status: r.status, body: r.json };
  };

  /** What an echoed prompt's logprobs must say: its token texts, null first, then the engine's prompt logprobs. */
  function assertPromptPart(lp: Logprobs, promptIds: number[], numTop: number): void {
    const expected = FakeEngine.promptLogprobs(s.engine.submitted.at(-1)!);
    assert.deepEqual(lp.tokens.slice(0, promptIds.length), promptIds.map(text));
    assert.equal(lp.token_logprobs[0], null);
    assert.equal(lp.top_logprobs[0], null);
    for (let i = 1; i < promptIds.length; i++) {
      assert.equal(lp.token_logprobs[i], expected[i]!.logprob);
      const top = lp.top_logprobs[i]!;
      assert.equal(top[text(promptIds[i]!)], expected[i]!.logprob);
      assert.ok(Object.keys(top).length <= numTop + 1);
    }
    let offset = 0;
    lp.tokens.forEach((t, i) => {
      assert.equal(lp.text_offset[i], offset, `offset of token ${i}`);
      offset += t.length;
    });
  }

  it('echo with logprobs returns the prompt\'s tokens and logprobs before the generated one (lm-eval)', async () => {
    const r = await post('/v1/completions', { model: MODEL, prompt: 'score me', max_tokens: 1, logprobs: 1, echo: true, temperature: 0 });
    assert.equal(r.status, 200);
    const req = s.engine.submitted.at(-1)!;
    assert.equal(req.sampling.promptLogprobs, 1);
    const ids = tok.encode('score me', { addSpecialTokens: true });
    const c = r.body.choices[0];
    const generated = FakeEngine.tokenAt(req, 0);
    assert.equal(c.text, 'score me' + text(generated));
    assert.equal(c.logprobs.tokens.length, ids.length + 1);
    assertPromptPart(c.logprobs, ids, 1);
    assert.equal(c.logprobs.tokens.at(-1), text(generated));
    assert.equal(c.prompt_logprobs.length, ids.length, 'and, as vLLM, in prompt_logprobs');
    assert.equal(r.body.usage.completion_tokens, 1);
  });

  it('echo with max_tokens 0 scores the prompt and generates nothing', async () => {
    const r = await post('/v1/completions', { model: MODEL, prompt: [0, 40, 41, 42], max_tokens: 0, logprobs: 2, echo: true });
    assert.equal(r.status, 200);
    assert.equal(s.engine.submitted.at(-1)!.sampling.maxTokens, 1);
    const c = r.body.choices[0];
    assert.equal(c.text, tok.decode([0, 40, 41, 42], { skipSpecialTokens: false }));
    assert.equal(c.logprobs.tokens.length, 4);
    assertPromptPart(c.logprobs, [0, 40, 41, 42], 2);
    assert.equal(r.body.usage.completion_tokens, 0);
    const bare = await post('/v1/completions', { model: MODEL, prompt: 'x', max_tokens: 0 });
    assert.equal(bare.status, 400);
    assert.equal(bare.body.error.param, 'max_tokens');
  });

  it('streams an echoed prompt with its logprobs in the first chunk, the same answer as unstreamed', async () => {
    const body = { model: MODEL, prompt: 'streamed', max_tokens: 4, logprobs: 1, echo: true, temperature: 0 };
    const full = (await post('/v1/completions', body)).body.choices[0];
    const stream = await client.completions.create({ ...body, stream: true });
    let streamed = '';
    const tokens: string[] = [];
    const offsets: number[] = [];
    let first = true;
    for await (const chunk of stream) {
      for (const c of chunk.choices) {
        if (first) assert.ok(c.text.startsWith('streamed'), 'the prompt comes with the first token');
        first = false;
        streamed += c.text;
        tokens.push(...(c.logprobs?.tokens ?? []));
        offsets.push(...(c.logprobs?.text_offset ?? []));
      }
    }
    assert.equal(streamed, full.text);
    assert.deepEqual(tokens, full.logprobs.tokens);
    assert.deepEqual(offsets, full.logprobs.text_offset);
  });

  it('streams echo with max_tokens 0 as the prompt alone', async () => {
    const stream = await client.completions.create({ model: MODEL, prompt: 'only', max_tokens: 0, logprobs: 0, echo: true, stream: true });
    let streamed = '';
    let numTokens = 0;
    for await (const chunk of stream) for (const c of chunk.choices) {
      streamed += c.text;
      numTokens += c.logprobs?.tokens?.length ?? 0;
    }
    assert.equal(streamed, 'only');
    assert.equal(numTokens, tok.encode('only', { addSpecialTokens: true }).length);
  });

  it('prompt_logprobs gives vLLM\'s per-token entries on completions and chat', async () => {
    const r = await post('/v1/completions', { model: MODEL, prompt: 'abc', max_tokens: 2, prompt_logprobs: 2 });
    assert.equal(r.status, 200);
    const expected = FakeEngine.promptLogprobs(s.engine.submitted.at(-1)!);
    const pl = r.body.choices[0].prompt_logprobs as (Record<string, { logprob: number; rank: number; decoded_token: string }> | null)[];
    assert.equal(pl.length, expected.length);
    assert.equal(pl[0], null);
    pl.slice(1).forEach((entry, k) => {
      const e = expected[k + 1]!;
      assert.deepEqual(entry![e.tokenId], { logprob: e.logprob, rank: e.rank, decoded_token: text(e.tokenId) });
      e.top.forEach((t, j) => { if (t.tokenId !== e.tokenId) assert.equal(entry![t.tokenId]!.rank, j + 1); });
    });
    assert.equal(r.body.choices[0].logprobs, null);
    const chat = await post('/v1/chat/completions', { model: MODEL, messages: [{ role: 'user', content: 'hi' }], max_tokens: 2, prompt_logprobs: 0 });
    assert.equal(chat.status, 200);
    const cpl = chat.body.prompt_logprobs as unknown[];
    assert.equal(cpl.length, s.engine.submitted.at(-1)!.promptTokenIds.length);
    assert.equal(cpl[0], null);
    const plain = await post('/v1/chat/completions', { model: MODEL, messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 });
    assert.equal(plain.body.prompt_logprobs, undefined);
    assert.equal(s.engine.submitted.at(-1)!.sampling.promptLogprobs, null);
  });

  it('refuses bad prompt_logprobs with a 400 naming it', async () => {
    for (const v of [-1, 21, 1.5, 'two']) {
      for (const path of ['/v1/completions', '/v1/chat/completions']) {
        const base = path === '/v1/completions' ? { prompt: 'x' } : { messages: [{ role: 'user', content: 'x' }] };
        const r = await post(path, { model: MODEL, ...base, prompt_logprobs: v });
        assert.equal(r.status, 400, `${path} ${v}`);
        assert.equal(r.body.error.param, 'prompt_logprobs');
        assert.equal(r.body.error.type, 'invalid_request_error');
      }
    }
  });
});
