import { test } from 'node:test';
import assert from 'node:assert/strict';
import { benchDecode, httpBatchRunner, type BatchRunner } from '../../src/lab/bench-decode.js';
import { startMockServer } from './mock-openai.js';

function linearRunner(startupMs: number, msPerToken: number, seen: { batch: number; maxTokens: number; first: number }[]): BatchRunner {
  return async (prompts, maxTokens) => {
    seen.push({ batch: prompts.length, maxTokens, first: prompts[0]![0]! });
    return startupMs + msPerToken * maxTokens;
  };
}

test('difference method removes start-up: rates and ratio from linear timings', async () => {
  const seenA: { batch: number; maxTokens: number; first: number }[] = [];
  const seenB: typeof seenA = [];
  const r = await benchDecode({
    targets: [
      { name: 'a', run: linearRunner(100, 2, seenA) },
      { name: 'b', run: linearRunner(900, 1, seenB) },
    ],
    batchSize: 4,
    numRepeats: 2,
  });
  // a: 4 * 256 tokens over 512 ms; b: over 256 ms, despite its slower start-up.
  assert.deepEqual(r.targets.map((t) => t.medianTokensPerS), [2000, 4000]);
  assert.equal(r.targets[1]!.perSeqTokensPerS, 1000);
  assert.equal(r.ratios[0]!.tokensPerS.median, 2);
  assert.deepEqual(seenA.map((s) => s.maxTokens), [64, 320, 64, 320, 64, 320]);
  assert.ok(seenA.every((s) => s.batch === 4));
  assert.equal(new Set(seenA.map((s) => s.first)).size, seenA.length, 'fresh nonce on every batch');
});

test('HTTP batch runner sends id prompts, EOS ignored, and times the batch', async () => {
  const server = await startMockServer({ prefillDelayMs: 1, tokenDelayMs: 2 });
  try {
    const run = httpBatchRunner(server.url, 'm');
    const ms = await run([[1, 2, 3], [4, 5, 6]], 5);
    assert.ok(ms >= 8, `${ms} ms`);
    assert.equal(server.numRequests, 2);
    assert.deepEqual(server.bodies.map((b) => b['prompt']), [[1, 2, 3], [4, 5, 6]]);
    assert.equal(server.bodies[0]!['ignore_eos'], true);
  } finally {
    await server.close();
  }
  await assert.rejects(httpBatchRunner('http://127.0.0.1:9', 'm')([[1]], 2), /decode batch against/);
});
