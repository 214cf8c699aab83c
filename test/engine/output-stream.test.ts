import { test } from 'node:test';
import assert from 'node:assert/strict';
import { OutputRouter } from '../../src/engine/output-stream.js';

test('outputs reach the stream of their request, in order, until finished', async () => {
  const router = new OutputRouter();
  const a = router.open('a');
  const b = router.open('b');
  const got: number[][] = [];
  const reading = (async () => {
    for await (const o of a) got.push(o.newTokenIds);
  })();
  router.route([{ requestId: 'a', newTokenIds: [1], finished: false }, { requestId: 'b', newTokenIds: [9], finished: false }]);
  await new Promise((r) => setImmediate(r));
  router.route([{ requestId: 'a', newTokenIds: [2], finished: true, finishReason: 'length' }]);
  await reading;
  assert.deepEqual(got, [[1], [2]]);
  assert.equal(router.size, 1);
  router.failAll('engine died');
  const bs = [];
  for await (const o of b) bs.push(o);
  assert.equal(bs.at(-1)?.finishReason, 'error');
  assert.equal(router.size, 0);
});

test('a request id cannot run twice at once', () => {
  const router = new OutputRouter();
  router.open('x');
  assert.throws(() => router.open('x'), /already running/);
});
