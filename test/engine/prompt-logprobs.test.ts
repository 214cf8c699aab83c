// Prompt logprobs (vLLM's prompt_logprobs): the logits of every prompt position come to the host, chunked or not,
// never from the prefix cache, beside the rows the step samples.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createEngineCore } from '../../src/engine/create-engine.js';
import { engineOptions, type EngineOptions } from '../../src/engine/options.js';
import type { EngineOutput, TokenLogprob } from '../../src/engine/types.js';
import { defaultSamplingParams, type SamplingParams } from '../../src/sampling/params.js';
import { makeTestModel } from '../../src/tools/make-test-model.js';

let dir = '';
before(async () => {
  dir = mkdtempSync(join(tmpdir(), 'quire-promptlp-'));
  await makeTestModel({ shape: 'tiny-qwen3', outDir: dir, dtype: 'f32', seed: 0 });
});
after(() => rmSync(dir, { recursive: true, force: true }));

interface Req {
  prompt: number[];
  params: Partial<SamplingParams>;
}

/** Runs the requests one after another (or together) on one engine; outputs per request. */
async function run(reqs: Req[], opts: Partial<EngineOptions> = {}, together = true): Promise<EngineOutput[][]> {
  const core = await createEngineCore(engineOptions({ model: dir, backend: 'cpu', cpuThreads: 1, ...opts }));
  try {
    const outputs: EngineOutput[] = [];
    const add = (r: Req, i: number) => core.addRequest({ requestId: `r${i}`, promptTokenIds: r.prompt,
      sampling: defaultSamplingParams({ temperature: 0, ignoreEos: true, ...r.params }), arrivalTime: 0, priority: 0,
      cacheSalt: null });
    if (together) reqs.forEach(add);
    for (let i = 0; i < reqs.length; i++) {
      if (!together) add(reqs[i]!, i);
      while (core.hasWork()) outputs.push(...core.step());
    }
    return reqs.map((_, i) => outputs.filter((o) => o.requestId === `r${i}`));
  } finally {
    core.dispose();
  }
}

const P = [5, 9, 11, 40, 3, 77, 12, 8, 150, 9, 31, 2];
const tokensOf = (os: EngineOutput[]) => os.flatMap((o) => o.newTokenIds);
const promptLpsOf = (os: EngineOutput[]) => {
  const withLps = os.filter((o) => o.promptLogprobs !== undefined);
  assert.equal(withLps.length, 1, 'prompt logprobs come once');
  assert.equal(withLps[0], os[0], 'with the first output');
  return withLps[0]!.promptLogprobs!;
};
function assertClose(a: (TokenLogprob | null)[], b: (TokenLogprob | null)[]): void {
  assert.equal(a.length, b.length);
  a.forEach((x, i) => {
    const y = b[i]!;
    if (x === null || y === null) return assert.equal(x, y);
    assert.equal(x.tokenId, y.tokenId);
    assert.ok(Math.abs(x.logprob - y.logprob) < 1e-5, `position ${i}: ${x.logprob} vs ${y.logprob}`);
    assert.deepEqual(x.top.map((t) => t.tokenId), y.top.map((t) => t.tokenId));
  });
}

test('a prompt token\'s logprob is the logprob the model gave it when it generated that token', async () => {
  const [gen] = await run([{ prompt: P, params: { maxTokens: 8, logprobs: 0 } }]);
  const generated = tokensOf(gen!);
  const genLps = gen!.flatMap((o) => o.logprobs ?? []);
  const full = [...P, ...generated];
  const [scored] = await run([{ prompt: full, params: { maxTokens: 1, promptLogprobs: 3 } }]);
  const lps = promptLpsOf(scored!);
  assert.equal(lps.length, full.length);
  assert.equal(lps[0], null);
  lps.slice(1).forEach((lp, i) => {
    assert.equal(lp!.tokenId, full[i + 1]);
    assert.equal(lp!.top.length, 3);
    assert.ok(lp!.top[0]!.logprob >= lp!.top[1]!.logprob && lp!.top[1]!.logprob >= lp!.top[2]!.logprob);
    assert.ok(lp!.logprob <= lp!.top[0]!.logprob + 1e-6);
    const rank = lp!.rank!;
    assert.ok(rank >= 1 && (rank === 1) === (lp!.top[0]!.tokenId === lp!.tokenId), `rank ${rank}`);
    if (rank <= 3) assert.equal(lp!.top[rank - 1]!.tokenId, lp!.tokenId);
  });
  // greedy generation: every generated token was the most likely one, its logprob the one recorded then
  for (let i = 0; i < generated.length; i++) {
    const lp = lps[P.length + i]!;
    assert.equal(lp.rank, 1);
    assert.ok(Math.abs(lp.logprob - genLps[i]!.logprob) < 1e-5, `token ${i}: ${lp.logprob} vs ${genLps[i]!.logprob}`);
  }
});

test('chunked prefill gives the same prompt logprobs; the rows sampled beside them keep their tokens', async () => {
  const long = [...P, ...P.map((t) => t + 1), 7];
  const [alone] = await run([{ prompt: long, params: { maxTokens: 3, promptLogprobs: 2 } }]);
  const plainAlone = await run([{ prompt: P, params: { maxTokens: 6 } }]);
  const [chunked, plain] = await run([
    { prompt: long, params: { maxTokens: 3, promptLogprobs: 2 } },
    { prompt: P, params: { maxTokens: 6 } },
  ], { maxNumBatchedTokens: 5 });
  assertClose(promptLpsOf(chunked!), promptLpsOf(alone!));
  assert.deepEqual(tokensOf(chunked!), tokensOf(alone!));
  assert.deepEqual(tokensOf(plain!), tokensOf(plainAlone[0]!));
  assert.ok(plain!.every((o) => o.promptLogprobs === undefined));
});

test('prompt logprobs never come from the prefix cache, and leave it to the requests after', async () => {
  const long = [...P, ...P, ...P, 4];
  const [fresh] = await run([{ prompt: long, params: { maxTokens: 1, promptLogprobs: 1 } }]);
  const [first, scored, after] = await run([
    { prompt: long, params: { maxTokens: 1 } },
    { prompt: long, params: { maxTokens: 1, promptLogprobs: 1 } },
    { prompt: long, params: { maxTokens: 1 } },
  ], { enablePrefixCaching: true, blockSize: 4 }, false);
  assert.equal(first![0]!.numCachedTokens, 0);
  assert.equal(scored![0]!.numCachedTokens, 0);
  assert.ok(after![0]!.numCachedTokens! > 0, `${after![0]!.numCachedTokens} cached tokens`);
  assertClose(promptLpsOf(scored!), promptLpsOf(fresh!));
});

test('a scoring request joining greedy rows that run scheduled ahead changes none of their tokens', async () => {
  const others = [[3, 4, 5, 6], [70, 71, 72]];
  const long = [...P, ...P.map((t) => t + 2)];
  const core = await createEngineCore(engineOptions({ model: dir, backend: 'cpu', cpuThreads: 1, maxNumBatchedTokens: 8 }));
  const outputs: EngineOutput[] = [];
  try {
    const add = (id: string, prompt: number[], params: Partial<SamplingParams>) => core.addRequest({ requestId: id,
      promptTokenIds: prompt, sampling: defaultSamplingParams({ temperature: 0, ignoreEos: true, ...params }),
      arrivalTime: 0, priority: 0, cacheSalt: null });
    others.forEach((p, i) => add(`o${i}`, p, { maxTokens: 12 }));
    for (let k = 0; k < 4; k++) outputs.push(...core.advance());
    const ahead = core.stats().numStepsScheduledAhead;
    assert.ok(ahead > 0, 'the greedy rows were scheduled ahead before the scoring request came');
    add('s', long, { maxTokens: 2, promptLogprobs: 1 });
    while (core.hasWork()) outputs.push(...core.advance());
  } finally {
    core.dispose();
  }
  const alone = await run(others.map((p) => ({ prompt: p, params: { maxTokens: 12 } })));
  const [scoredAlone] = await run([{ prompt: long, params: { maxTokens: 2, promptLogprobs: 1 } }]);
  others.forEach((_, i) => assert.deepEqual(tokensOf(outputs.filter((o) => o.requestId === `o${i}`)), tokensOf(alone[i]!)));
  const scored = outputs.filter((o) => o.requestId === 's');
  assertClose(promptLpsOf(scored), promptLpsOf(scoredAlone!));
  assert.deepEqual(tokensOf(scored), tokensOf(scoredAlone!));
});
