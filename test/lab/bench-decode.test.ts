import { test } from 'node:test';
import assert from 'node:assert/strict';
import { benchDecode, decodeRooflineStepsPerS, httpBatchRunner, meanMeasuredContext, type BatchRunner } from '../../src/lab/bench-decode.js';
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

test('given prompts: row i runs prompts[i mod n] as given, every batch (no nonce); the mean prompt length reported', async () => {
  const batches: number[][][] = [];
  const r = await benchDecode({
    targets: [{ name: 'a', run: async (prompts, maxTokens) => {
      batches.push(prompts);
      return 10 + maxTokens;
    } }],
    batchSize: 3,
    numRepeats: 1,
    prompts: [[5, 6, 7, 8], [9, 10]],
  });
  for (const b of batches) assert.deepEqual(b, [[5, 6, 7, 8], [9, 10], [5, 6, 7, 8]]);
  assert.equal(r.promptTokens, 10 / 3);
  await assert.rejects(benchDecode({ targets: [{ name: 'a', run: async () => 1 }], prompts: [] }), /prompts is empty/);
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

test('the decode roofline counts each row\'s K/V of its mean measured context and its state, beside the weights', () => {
  // 1 GB of weights, 100 KB of K/V a token, no state: one row at 4,000 tokens of context reads 1.4 GB a step
  const b = { weightBytes: 1e9, kvBytesPerToken: 1e5, stateBytesPerSeq: 0 };
  assert.equal(decodeRooflineStepsPerS(2.8e12, b, 1, 4000), 2000);
  // 8 rows: 1 GB + 8 x 0.4 GB
  assert.equal(decodeRooflineStepsPerS(4.2e12, b, 8, 4000), 1000);
  // a hybrid's state is read and written every step, by each row
  assert.equal(decodeRooflineStepsPerS(2e12, { ...b, kvBytesPerToken: 0, stateBytesPerSeq: 0.25e9 }, 2, 4000), 1000);
  // the difference method counts the tokens between g1 and g2: their mean context
  assert.equal(meanMeasuredContext(1000, 64, 320), 1192);
});

