// vLLM's request extras for scoring and constrained sampling: allowed_token_ids, bad_words (tokenized as vLLM
// does), truncate_prompt_tokens, return_tokens_as_token_ids; and their bad values as 400s naming the field.

import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { ByteTokenizer } from './helpers/fake-tokenizer.js';
import { MODEL, postJson, startTestServer, type TestServer } from './helpers/start.js';

const tok = new ByteTokenizer();

describe('vLLM extras', () => {
  let s: TestServer;
  before(async () => { s = await startTestServer({ maxModelLen: 64 }); });
  after(() => s.close());
  const post = async (path: string, body: Record<string, unknown>) => {
    const r = await postJson(`${s.url}${path}`, { model: MODEL, ...body });
    return { status: r.status, body: r.json };
  };
  const chat = (content: string) => ({ messages: [{ role: 'user', content }] });

  it('truncate_prompt_tokens keeps the prompt\'s last tokens (-1: the context length), on completions and chat', async () => {
    const long = 'abcdefghij'.repeat(8);  // 81 tokens with <bos>: more than the context
    const r = await post('/v1/completions', { prompt: long, max_tokens: 2, truncate_prompt_tokens: 5, echo: true });
    assert.equal(r.status, 200);
    assert.deepEqual(s.engine.submitted.at(-1)!.promptTokenIds, tok.encode(long, { addSpecialTokens: true }).slice(-5));
    assert.ok(r.body.choices[0].text.startsWith('fghij'), 'the echo is the prompt the model saw');
    assert.equal(r.body.usage.prompt_tokens, 5);
    const ids = await post('/v1/completions', { prompt: [0, 40, 41, 42, 43], max_tokens: 1, truncate_prompt_tokens: 3 });
    assert.deepEqual(s.engine.submitted.at(-1)!.promptTokenIds, [41, 42, 43]);
    assert.equal(ids.status, 200);
    const all = await post('/v1/completions', { prompt: 'short', max_tokens: 1, truncate_prompt_tokens: -1 });
    assert.equal(all.status, 200);
    assert.deepEqual(s.engine.submitted.at(-1)!.promptTokenIds, tok.encode('short', { addSpecialTokens: true }));
    const c = await post('/v1/chat/completions', { ...chat('hello there'), max_tokens: 1, truncate_prompt_tokens: 4 });
    assert.equal(c.status, 200);
    assert.equal(s.engine.submitted.at(-1)!.promptTokenIds.length, 4);
    const untruncated = await post('/v1/completions', { prompt: long, max_tokens: 2 });
    assert.equal(untruncated.status, 400);
  });

  it('chat echo: the last message, when it is the assistant\'s, starts the answer, streamed or not', async () => {
    const body = { messages: [{ role: 'user', content: 'tell' }, { role: 'assistant', content: 'Once upon' }], max_tokens: 4,
      temperature: 0, continue_final_message: true, add_generation_prompt: false, echo: true };
    const full = await post('/v1/chat/completions', body);
    assert.equal(full.status, 200);
    const content = full.body.choices[0].message.content as string;
    const plain = await post('/v1/chat/completions', { ...body, echo: false });
    assert.equal(content, 'Once upon' + plain.body.choices[0].message.content);
    const res = await fetch(`${s.url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: MODEL, ...body, stream: true }) });
    const deltas = (await res.text()).split('\n').filter((l) => l.startsWith('data: {'))
      .map((l) => JSON.parse(l.slice(6)) as { choices: { delta: { content?: string } }[] })
      .flatMap((c) => c.choices.map((x) => x.delta.content ?? ''));
    assert.equal(deltas[0], 'Once upon', 'the role chunk carries the echo');
    assert.equal(deltas.join(''), content);
    const userLast = await post('/v1/chat/completions', { messages: [{ role: 'user', content: 'tell' }], max_tokens: 2, echo: true,
      temperature: 0 });
    const userPlain = await post('/v1/chat/completions', { messages: [{ role: 'user', content: 'tell' }], max_tokens: 2, temperature: 0 });
    assert.equal(userLast.body.choices[0].message.content, userPlain.body.choices[0].message.content, 'no echo after a user turn');
  });

  it('refuses suffix and best_of, which would change the answer, instead of ignoring them', async () => {
    for (const [extra, param] of [[{ suffix: 'end' }, 'suffix'], [{ best_of: 3 }, 'best_of'], [{ best_of: 0 }, 'best_of']] as const) {
      const r = await post('/v1/completions', { prompt: 'x', max_tokens: 1, ...extra });
      assert.equal(r.status, 400, JSON.stringify(extra));
      assert.equal(r.body.error.param, param);
    }
    for (const extra of [{ suffix: '' }, { suffix: null }, { best_of: 1 }]) {
      assert.equal((await post('/v1/completions', { prompt: 'x', max_tokens: 1, ...extra })).status, 200, JSON.stringify(extra));
    }
  });

  it('refuses a truncation of 0 or beyond the context length', async () => {
    for (const k of [0, 65, -2, 'x']) {
      const r = await post('/v1/completions', { prompt: 'x', truncate_prompt_tokens: k });
      assert.equal(r.status, 400, String(k));
      assert.equal(r.body.error.param, 'truncate_prompt_tokens');
    }
  });

  it('passes allowed_token_ids and bad_words to the engine, tokenized alone and inside text', async () => {
    const r = await post('/v1/chat/completions', { ...chat('x'), max_tokens: 1, allowed_token_ids: [100, 101], bad_words: ['zz', '  q'] });
    assert.equal(r.status, 200);
    const sp = s.engine.submitted.at(-1)!.sampling;
    assert.deepEqual(sp.allowedTokenIds, [100, 101]);
    // byte tokens: a space before a word is a token of its own, so only the words alone count
    assert.deepEqual(sp.badWords, [tok.encode('zz', { addSpecialTokens: false }), tok.encode('q', { addSpecialTokens: false })]);
  });

  it('refuses bad allowed_token_ids and bad_words with a 400 naming them', async () => {
    const cases: [Record<string, unknown>, string][] = [
      [{ allowed_token_ids: [] }, 'allowed_token_ids'],
      [{ allowed_token_ids: [tok.vocabSize] }, 'allowed_token_ids'],
      [{ allowed_token_ids: 'a' }, 'allowed_token_ids'],
      [{ bad_words: 'word' }, 'bad_words'],
      [{ bad_words: [''] }, 'bad_words'],
      [{ bad_words: [3] }, 'bad_words'],
    ];
    for (const [extra, param] of cases) {
      for (const body of [{ prompt: 'x', ...extra }, { ...chat('x'), ...extra }]) {
        const r = await post('prompt' in body ? '/v1/completions' : '/v1/chat/completions', body);
        assert.equal(r.status, 400, JSON.stringify(body));
        assert.equal(r.body.error.param, param);
      }
    }
  });

  it('return_tokens_as_token_ids names logprobs\' tokens by id, on completions and chat', async () => {
    const r = await post('/v1/completions', { prompt: 'ab', max_tokens: 3, logprobs: 2, return_tokens_as_token_ids: true });
    const lp = r.body.choices[0].logprobs;
    const generated = s.engine.submitted.at(-1)!;
    assert.equal(lp.tokens.length, 3);
    lp.tokens.forEach((t: string) => assert.match(t, /^token_id:\d+$/));
    lp.top_logprobs.forEach((top: Record<string, number>) => Object.keys(top).forEach((k) => assert.match(k, /^token_id:\d+$/)));
    assert.ok(generated.sampling.logprobs === 2);
    const c = await post('/v1/chat/completions', { ...chat('ab'), max_tokens: 2, logprobs: true, top_logprobs: 1, return_tokens_as_token_ids: true });
    const content = c.body.choices[0].logprobs.content as { token: string; bytes: number[]; top_logprobs: { token: string }[] }[];
    assert.equal(content.length, 2);
    for (const e of content) {
      assert.match(e.token, /^token_id:\d+$/);
      assert.deepEqual(e.bytes, [...Buffer.from(e.token)]);
      e.top_logprobs.forEach((t) => assert.match(t.token, /^token_id:\d+$/));
    }
    const plain = await post('/v1/completions', { prompt: 'ab', max_tokens: 1, logprobs: 0 });
    assert.doesNotMatch(plain.body.choices[0].logprobs.tokens[0], /^token_id:/);
  });
});

describe('--return-tokens-as-token-ids', () => {
  let s: TestServer;
  before(async () => { s = await startTestServer({ returnTokensAsTokenIds: true }); });
  after(() => s.close());

  it('names logprobs\' tokens by id unless a request says otherwise', async () => {
    const post = async (body: Record<string, unknown>) =>
      (await postJson(`${s.url}/v1/completions`, { model: MODEL, prompt: 'ab', max_tokens: 1, logprobs: 0, ...body })).json;
    assert.match((await post({})).choices[0].logprobs.tokens[0], /^token_id:\d+$/);
    assert.doesNotMatch((await post({ return_tokens_as_token_ids: false })).choices[0].logprobs.tokens[0], /^token_id:/);
  });
});
