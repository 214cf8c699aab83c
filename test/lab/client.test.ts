import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { SseParser } from '../../src/lab/sse.js';
import { StreamTimer, completionsUrl, parseCompletionChunk, streamCompletion } from '../../src/lab/client.js';

test('SSE events survive frames split across chunks at any byte', () => {
  const stream =
    'data: {"choices":[{"text":"a"}]}\n\n: keep-alive\n\r\ndata: {"choices":[{"text":"\u00e9"}]}\r\n\r\nevent: error\ndata: line1\ndata: line2\n\ndata: [DONE]\n\n';
  const bytes = new TextEncoder().encode(stream);
  const whole = new SseParser().push(bytes);
  assert.deepEqual(
    whole.map((e) => [e.event, e.data]),
    [
      ['message', '{"choices":[{"text":"a"}]}'],
      ['message', '{"choices":[{"text":"\u00e9"}]}'],
      ['error', 'line1\nline2'],
      ['message', '[DONE]'],
    ],
  );
  for (let cut = 1; cut < bytes.length; cut++) {
    const p = new SseParser();
    const got = [...p.push(bytes.slice(0, cut)), ...p.push(bytes.slice(cut)), ...p.end()];
    assert.deepEqual(got, whole, `split at byte ${cut}`);
  }
});

test('an unterminated last event is flushed at end of stream', () => {
  const p = new SseParser();
  assert.deepEqual(p.push('data: x'), []);
  assert.deepEqual(p.end(), [{ event: 'message', data: 'x' }]);
});

test('chunk parsing: token ids, vLLM token_id strings, usage, error frames', () => {
  assert.deepEqual(parseCompletionChunk('{"choices":[{"text":"hi","token_ids":[5,6]}]}').tokenIds, [5, 6]);
  assert.deepEqual(
    parseCompletionChunk('{"choices":[{"text":"hi","logprobs":{"tokens":["token_id:42"]}}]}').tokenIds,
    [42],
  );
  const u = parseCompletionChunk('{"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":3}}');
  assert.deepEqual(u.usage, { promptTokens: 9, completionTokens: 3, cachedPromptTokens: null });
  const cached = parseCompletionChunk('{"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":8}}}');
  assert.equal(cached.usage!.cachedPromptTokens, 8);
  assert.equal(parseCompletionChunk('{"error":{"message":"boom"}}').error, 'boom');
  assert.equal(parseCompletionChunk('{"object":"error","message":"bad model"}').error, 'bad model');
  assert.match(parseCompletionChunk('{nope').error!, /unparsable/);
});

test('stream timer: TTFT, ITL per delta, usage overrides counted tokens', () => {
  const t = new StreamTimer(1000);
  t.onData('{"choices":[{"text":"a","token_ids":[1]}]}', 1050);
  t.onData('{"choices":[{"text":"","token_ids":[]}]}', 1055);
  t.onData('{"choices":[{"text":"bc","token_ids":[2,3]}]}', 1070);
  t.onData('{"choices":[{"text":"d","token_ids":[4],"finish_reason":"length"}]}', 1100);
  t.onData('{"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":4}}', 1101);
  t.onData('[DONE]', 1102);
  const r = t.finish(1102);
  assert.equal(r.ok, true);
  assert.equal(r.ttftMs, 50);
  assert.deepEqual(r.itlMs, [20, 30]);
  assert.equal(r.e2eMs, 102);
  assert.equal(r.outputTokens, 4);
  assert.equal(r.promptTokens, 12);
  assert.deepEqual(r.tokenIds, [1, 2, 3, 4]);
  assert.equal(r.text, 'abcd');
  assert.equal(r.finishReason, 'length');
});

test('stream timer counts a delta whose text is held back (empty) as a token, not the finish or usage chunks', () => {
  const t = new StreamTimer(0);
  t.onData('{"choices":[{"text":"","finish_reason":null}]}', 10);
  t.onData('{"choices":[{"text":"ab","finish_reason":null}]}', 25);
  t.onData('{"choices":[{"text":"","finish_reason":"length"}]}', 26);
  t.onData('{"choices":[]}', 27);
  const r = t.finish(30);
  assert.equal(r.ok, true);
  assert.equal(r.ttftMs, 10);
  assert.deepEqual(r.itlMs, [15]);
  assert.equal(r.outputTokens, 2);
});

test('stream timer without ids or usage counts text deltas; an error frame fails the request', () => {
  const t = new StreamTimer(0);
  t.onData('{"choices":[{"text":"a"}]}', 10);
  t.onData('{"choices":[{"text":"b"}]}', 25);
  t.onData('{"error":{"message":"out of memory"}}', 30);
  const r = t.finish(30);
  assert.equal(r.outputTokens, 2);
  assert.equal(r.promptTokens, null);
  assert.equal(r.tokenIds, null);
  assert.equal(r.ok, false);
  assert.equal(r.error, 'out of memory');
});

test('completions URL from a base URL', () => {
  assert.equal(completionsUrl('http://h:1/'), 'http://h:1/v1/completions');
  assert.equal(completionsUrl('http://h:1/v1'), 'http://h:1/v1/completions');
  assert.equal(completionsUrl('http://h:1/v1/completions'), 'http://h:1/v1/completions');
});

test('streamCompletion over HTTP: body fields, split frames, HTTP errors', async () => {
  let seenBody: Record<string, unknown> = {};
  const server = createServer((req, res) => {
    let body = '';
    req.on('data', (c) => (body += c));
    req.on('end', async () => {
      seenBody = JSON.parse(body) as Record<string, unknown>;
      if (seenBody['model'] !== 'm') {
        res.writeHead(404, { 'content-type': 'application/json' }).end('{"error":{"message":"no such model"}}');
        return;
      }
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      const frames = 'data: {"choices":[{"text":"x","token_ids":[7]}]}\n\ndata: {"choices":[{"text":"y","token_ids":[8],"finish_reason":"length"}]}\n\ndata: [DONE]\n\n';
      res.write(frames.slice(0, 20));
      await new Promise((r) => setTimeout(r, 15));
      res.end(frames.slice(20));
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  try {
    const r = await streamCompletion({ url, model: 'm', prompt: [1, 2], maxTokens: 2, ignoreEos: true, returnTokenIds: true });
    assert.equal(r.ok, true, r.error ?? "");
    assert.deepEqual(r.tokenIds, [7, 8]);
    assert.ok(r.ttftMs >= 10, `ttft ${r.ttftMs}`);
    assert.equal(seenBody['stream'], true);
    assert.deepEqual(seenBody['stream_options'], { include_usage: true });
    assert.equal(seenBody['ignore_eos'], true);
    assert.equal(seenBody['return_token_ids'], true);
    assert.deepEqual(seenBody['prompt'], [1, 2]);
    const bad = await streamCompletion({ url, model: 'other', prompt: 'p', maxTokens: 2 });
    assert.equal(bad.ok, false);
    assert.match(bad.error!, /HTTP 404.*no such model/);
  } finally {
    server.close();
  }
});
