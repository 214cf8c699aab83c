import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { ByteTokenizer } from './helpers/fake-tokenizer.js';
import { postJson, readSse, startTestServer, type TestServer } from './helpers/start.js';

const tok = new ByteTokenizer();

async function stream(url: string, body: object): Promise<string[]> {
  const res = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ ...body, stream: true }) });
  assert.equal(res.status, 200);
  assert.match(res.headers.get('content-type') ?? '', /^text\/event-stream/);
  return readSse(res);
}

describe('SSE streams', () => {
  let s: TestServer;
  before(async () => (s = await startTestServer({}, { numCachedTokens: 3 })));
  after(() => s.close());

  it('end with [DONE], put token ids on the choices and prompt ids on the first chunk', async () => {
    const frames = await stream(`${s.url}/v1/completions`, {
      prompt: 'ids', max_tokens: 6, temperature: 0, return_token_ids: true, stream_options: { include_usage: true },
    });
    assert.equal(frames.at(-1), '[DONE]');
    const chunks = frames.slice(0, -1).map((f) => JSON.parse(f));
    assert.deepEqual(chunks[0].choices[0].prompt_token_ids, tok.encode('ids'));
    const ids = chunks.flatMap((c) => c.choices.flatMap((ch: { token_ids?: number[] }) => ch.token_ids ?? []));
    const text = chunks.flatMap((c) => c.choices.map((ch: { text: string }) => ch.text)).join('');
    assert.equal(ids.length, 6);
    assert.equal(tok.decode(ids), text);
    const usage = chunks.at(-1);
    assert.deepEqual(usage.choices, []);
    assert.deepEqual(usage.usage, { prompt_tokens: 4, completion_tokens: 6, total_tokens: 10, prompt_tokens_details: { cached_tokens: 3 } });
    const full = await postJson(`${s.url}/v1/completions`, { prompt: 'ids', max_tokens: 6, temperature: 0, return_token_ids: true });
    assert.deepEqual(full.json.choices[0].token_ids, ids);
    assert.deepEqual(full.json.choices[0].prompt_token_ids, tok.encode('ids'));
  });

  it('chat streams carry prompt_token_ids once, a role delta per choice, and a finish chunk per choice', async () => {
    const frames = await stream(`${s.url}/v1/chat/completions`, {
      messages: [{ role: 'user', content: 'x' }], max_tokens: 3, n: 2, temperature: 0, return_token_ids: true,
    });
    const chunks = frames.slice(0, -1).map((f) => JSON.parse(f));
    assert.equal(chunks.filter((c) => c.prompt_token_ids !== undefined).length, 1);
    const roles = chunks.flatMap((c) => c.choices).filter((ch) => ch.delta.role === 'assistant').map((ch) => ch.index);
    assert.deepEqual(roles.sort(), [0, 1]);
    const finishes = chunks.flatMap((c) => c.choices).filter((ch) => ch.finish_reason !== null);
    assert.deepEqual(finishes.map((f) => f.index).sort(), [0, 1]);
    assert.ok(finishes.every((f) => f.finish_reason === 'length'));
  });

  it('holds back text that may begin a stop string and never streams past it', async () => {
    const full = (await postJson(`${s.url}/v1/completions`, { prompt: 'hold', max_tokens: 30, temperature: 0 })).json.choices[0].text as string;
    const stop = full.slice(20, 23);
    const frames = await stream(`${s.url}/v1/completions`, { prompt: 'hold', max_tokens: 30, temperature: 0, stop });
    const chunks = frames.slice(0, -1).map((f) => JSON.parse(f));
    const text = chunks.flatMap((c) => c.choices.map((ch: { text: string }) => ch.text)).join('');
    assert.equal(text, full.slice(0, full.indexOf(stop)));
    assert.equal(chunks.at(-1).choices[0].finish_reason, 'stop');
    assert.equal(chunks.at(-1).choices[0].stop_reason, stop);
    // as vLLM: every generated token still sends a chunk, its text empty while held back (clients time each token)
    const deltas = chunks.filter((c) => c.choices[0]?.finish_reason === null);
    assert.equal(deltas.length, full.indexOf(stop) + stop.length);
    assert.ok(deltas.some((c) => c.choices[0].text === ''), 'a held-back token sends an empty-text chunk');
  });
});
