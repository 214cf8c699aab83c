// A seeded fuzzer against a real `quire serve` on the demo model: a few thousand mutated bodies over five endpoints.
// None may get a 5xx, none may hang, every error is OpenAI's shape, and the server answers /health and a plain
// completion afterwards. scripts/fuzz-serve.mjs runs more bodies, or another seed, against any server.

import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { fuzzBody } from './fuzz-bodies.js';
import { startServe, stillServing, type Served } from './harness.js';

const SEED = 38;
const NUM_BODIES = 2000;
const CONCURRENCY = 4;

describe('seeded fuzzer against quire serve', () => {
  let s: Served;
  before(async () => (s = await startServe(['--trust-request-chat-template', '--chat-template-render-timeout', '1'])));
  after(async () => {
    s.child.kill('SIGKILL');
    await s.exited;
  });

  it(`answers ${NUM_BODIES} fuzzed bodies (seed ${SEED}) without a 5xx or a hang`, async () => {
    const failures: string[] = [];
    const counts = new Map<number, number>();
    let next = 0;
    const worker = async () => {
      while (next < NUM_BODIES) {
        const i = next++;
        const { path, body } = fuzzBody(SEED, i);
        let status = 0;
        let text = '';
        try {
          const res = await fetch(s.url + path, { method: 'POST', headers: { 'content-type': 'application/json' }, body,
            signal: AbortSignal.timeout(30_000) });
          status = res.status;
          text = await res.text();
        } catch (e) {
          failures.push(`#${i} ${path}: ${(e as Error).message} ${body.slice(0, 200)}`);
          continue;
        }
        counts.set(status, (counts.get(status) ?? 0) + 1);
        if (status >= 500) failures.push(`#${i} ${path}: ${status} ${text.slice(0, 200)} <- ${body.slice(0, 200)}`);
        else if (status >= 400) {
          let ok = false;
          try {
            const e = JSON.parse(text).error;
            ok = typeof e.message === 'string' && typeof e.type === 'string';
          } catch { /* not JSON */ }
          if (!ok) failures.push(`#${i} ${path}: ${status} not an OpenAI error: ${text.slice(0, 200)}`);
        }
      }
    };
    await Promise.all(Array.from({ length: CONCURRENCY }, worker));
    assert.deepEqual(failures.slice(0, 10), [], `${failures.length} failures; statuses ${JSON.stringify([...counts])}`);
    assert.ok((counts.get(200) ?? 0) > 50, `some bodies were served: ${JSON.stringify([...counts])}`);
    await stillServing(s.url);
  });
});
