// vLLM's request extras: continue_final_message and add_special_tokens for chat, and
// stream_options.continuous_usage_stats.

import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { BOS, ByteTokenizer } from './helpers/fake-tokenizer.js';
import { postJson, readSse, startTestServer, type TestServer } from './helpers/start.js';

describe('vLLM extras', () => {
  let s: TestServer;
  const tok = new ByteTokenizer();
  before(async () => {
    s = await startTestServer();
  });
  after(() => s.close());
  const convo = [{ role: 'user', content: 'Name a colour.' }, { role: 'assistant', content: 'The colour is' }];

  it('continue_final_message ends the prompt inside the last message (no end of turn, no generation prompt)', async () => {
    const t = await postJson(`${s.url}/tokenize`, { messages: convo, continue_final_message: true });
    assert.equal(t.status, 200);
    assert.equal(tok.decode(t.json.tokens), '<bos><|user|>Name a colour.\n<|assistant|>The colour is');
    const r = await postJson(`${s.url}/v1/chat/completions`, { messages: convo, continue_final_message: true, max_tokens: 2 });
    assert.equal(r.status, 200);
    assert.deepEqual(s.engine.submitted.at(-1)!.promptTokenIds, t.json.tokens);
    const plain = await postJson(`${s.url}/tokenize`, { messages: convo });
    assert.equal(tok.decode(plain.json.tokens), '<bos><|user|>Name a colour.\n<|assistant|>The colour is\n<|assistant|>');
  });

  it('refuses continue_final_message with add_generation_prompt, or with an empty final message', async () => {
    const both = await postJson(`${s.url}/v1/chat/completions`, { messages: convo, continue_final_message: true, add_generation_prompt: true });
    assert.equal(both.status, 400);
    assert.match(both.json.error.message, /Cannot set both `continue_final_message` and `add_generation_prompt`/);
    const empty = await postJson(`${s.url}/v1/chat/completions`, { messages: [...convo, { role: 'assistant', content: ' ' }], continue_final_message: true });
    assert.equal(empty.status, 400);
    assert.equal(empty.json.error.param, 'messages');
  });

  it('add_special_tokens adds the tokenizer\'s BOS in front of the template\'s own', async () => {
    const off = await postJson(`${s.url}/tokenize`, { messages: convo });
    const on = await postJson(`${s.url}/tokenize`, { messages: convo, add_special_tokens: true });
    assert.deepEqual(on.json.tokens, [BOS, ...off.json.tokens]);
  });

  it('continuous_usage_stats puts each choice\'s usage so far in every chunk', async () => {
    const res = await fetch(`${s.url}/v1/completions`, {
      method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ prompt: ['ab', 'cde'], n: 2, max_tokens: 3, stream: true, stream_options: { include_usage: true, continuous_usage_stats: true } }),
    });
    const chunks = (await readSse(res)).filter((d) => d !== '[DONE]').map((d) => JSON.parse(d));
    const last = chunks.pop();
    assert.deepEqual(last.choices, []);
    assert.equal(last.usage.completion_tokens, 12);
    const seen = new Map<number, number>();
    for (const c of chunks) {
      const i = c.choices[0].index as number;
      const prompt = i < 2 ? 3 : 4;
      assert.equal(c.usage.prompt_tokens, prompt);
      assert.equal(c.usage.total_tokens, prompt + c.usage.completion_tokens);
      assert.ok(c.usage.completion_tokens >= (seen.get(i) ?? 0));
      seen.set(i, c.usage.completion_tokens);
    }
    assert.deepEqual([...seen.entries()].sort(), [[0, 3], [1, 3], [2, 3], [3, 3]]);
    const without = await fetch(`${s.url}/v1/completions`, {
      method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ prompt: 'ab', max_tokens: 2, stream: true, stream_options: { continuous_usage_stats: true } }),
    });
    for (const d of (await readSse(without)).filter((x) => x !== '[DONE]')) assert.equal('usage' in JSON.parse(d), false);
  });
});
