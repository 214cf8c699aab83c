// Speculative decoding (n-gram) in the engine on the CPU backend. The bundled demo model is trained and repeats
// itself on repetitive prompts, so its proposals are accepted: a greedy transcript must be the same, token for
// token, with speculation on or off, on every scheduling path (batching, chunked prefill, prefix caching,
// preemption, the same prompt several times as n > 1 runs it); stops, max_tokens and logprobs too. A tiny random
// MoE model gives the same gate for mixture-of-experts layers; a hybrid model is refused at start-up.

import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createEngineCore } from '../../src/engine/create-engine.js';
import { InProcessEngineClient } from '../../src/engine/inprocess-client.js';
import { engineOptions, type EngineOptions } from '../../src/engine/options.js';
import { defaultSamplingParams } from '../../src/sampling/params.js';
import { makeTestModel } from '../../src/tools/make-test-model.js';
import { defaultModelDir } from '../../src/loader/default-model.js';
import { generate } from './spec-helpers.js';
import type { ForwardBatch } from '../../src/backend/batch.js';
import { Model } from '../../src/model/model.js';

const DEMO = defaultModelDir();
const SPEC = { method: 'ngram', num_speculative_tokens: 4, prompt_lookup_min: 2, prompt_lookup_max: 4 };
const PROMPTS = [
  'And God said, Let there be light: and there was light. And God said, Let there be light: and there was',
  'In the beginning God created the heaven and the earth. And the earth was without form',
  'The LORD is my shepherd; I shall not want. He maketh me to lie down in green pastures',
  'And he said unto them, Go ye into all the world. And he said unto them,',
];

let tmp = '';
before(() => {
  tmp = mkdtempSync(join(tmpdir(), 'quire-spec-'));
});
after(() => rmSync(tmp, { recursive: true, force: true }));

test('a step with proposals reaches the model as a verify step (ForwardBatch.verify); no other step does', async () => {
  const seen: { verify: boolean; verifyShaped: boolean }[] = [];
  const forward = Model.prototype.forwardTokensAsync;
  Model.prototype.forwardTokensAsync = function (this: Model, batch: ForwardBatch) {
    // rows sampled at several positions: a row and its proposals (no prompt logprobs are asked for here)
    seen.push({ verify: batch.verify === true, verifyShaped: batch.logitsIndices.length > batch.numSeqs });
    return forward.call(this, batch);
  };
  try {
    await generate(DEMO, { speculativeConfig: SPEC }, PROMPTS, { maxTokens: 24 });
  } finally {
    Model.prototype.forwardTokensAsync = forward;
  }
  assert.ok(seen.some((s) => s.verify), 'no verify step');
  for (const s of seen) assert.equal(s.verify, s.verifyShaped);
});

test('greedy transcripts are identical with n-gram speculation on and off, on every scheduling path', async () => {
  const off = await generate(DEMO, {}, PROMPTS, { maxTokens: 40 });
  const paths: Record<string, Partial<EngineOptions>> = {
    'batch of 4': {},
    'chunk 7 (chunked prefill; proposals cut to the budget)': { maxNumBatchedTokens: 7 },
    'prefix cache off': { enablePrefixCaching: false },
    'one sequence at a time': { maxNumSeqs: 1 },
    'async scheduling off': { asyncScheduling: false },
    'k = 1, lookup 1..1': { speculativeConfig: { method: 'ngram', num_speculative_tokens: 1, prompt_lookup_min: 1, prompt_lookup_max: 1 } },
    // 6 pages of 16 tokens (5 layers x 2 x 2 heads x 64 x 4 bytes a token): the batch cannot fit, requests are preempted
    'tiny pool (preemption)': { kvCacheBytes: 6 * 16 * 5120, maxModelLen: 96, blockSize: 16 },
  };
  for (const [name, opts] of Object.entries(paths)) {
    const on = await generate(DEMO, { speculativeConfig: SPEC, ...opts }, PROMPTS, { maxTokens: 40 });
    assert.deepEqual(on.tokenIds, off.tokenIds, `path "${name}" changed a transcript`);
    const s = on.stats.specDecoding!;
    assert.ok(s.numDrafts > 0 && s.numAcceptedTokens > 0, `path "${name}": nothing was accepted (${JSON.stringify(s)})`);
    if (name.startsWith('tiny pool')) assert.ok(on.stats.numPreemptions > 0, 'the tiny pool preempted nothing');
    if (name.startsWith('batch')) assert.ok(on.stats.numSteps < off.stats.numSteps, 'accepted proposals saved no step');
  }
  assert.equal(off.stats.specDecoding, undefined, 'no speculative counters when it is off');
});

test('the same prompt several times (as n > 1 runs it, sharing cached pages) and a repetitive prompt: identical, '
  + 'proposals accepted, in fewer steps; counters per position never rise with the position', async () => {
  const repeat = 'Holy, holy, holy, Lord God Almighty. Holy, holy, holy, Lord God Almighty. Holy, holy, holy,';
  const prompts = [repeat, repeat, repeat];
  const off = await generate(DEMO, {}, prompts, { maxTokens: 30 });
  const on = await generate(DEMO, { speculativeConfig: SPEC }, prompts, { maxTokens: 30 });
  assert.deepEqual(on.tokenIds, off.tokenIds);
  const s = on.stats.specDecoding!;
  assert.equal(s.numAcceptedTokensPerPos.length, 4);
  assert.equal(s.numAcceptedTokens, s.numAcceptedTokensPerPos.reduce((a, b) => a + b, 0));
  for (let j = 1; j < 4; j++) assert.ok(s.numAcceptedTokensPerPos[j]! <= s.numAcceptedTokensPerPos[j - 1]!);
  assert.ok(s.numAcceptedTokens > 0.1 * s.numDraftTokens, `acceptance ${s.numAcceptedTokens} / ${s.numDraftTokens}`);
  assert.ok(on.stats.numSteps < off.stats.numSteps);
});

test('disable_by_batch_size: no proposals in a step of that many running requests or more', async () => {
  const off = await generate(DEMO, {}, PROMPTS, { maxTokens: 20 });
  const at = (n: number, opts: Partial<EngineOptions> = {}) =>
    generate(DEMO, { speculativeConfig: { ...SPEC, disable_by_batch_size: n }, ...opts }, PROMPTS, { maxTokens: 20 });
  // one running request is already too many: speculation never runs, and the transcripts are as without it
  const never = await at(1);
  assert.deepEqual(never.tokenIds, off.tokenIds);
  assert.equal(never.stats.specDecoding!.numDrafts, 0);
  // one request at a time stays below 2: every step may speculate
  const single = await at(2, { maxNumSeqs: 1 });
  assert.deepEqual(single.tokenIds, off.tokenIds);
  assert.ok(single.stats.specDecoding!.numAcceptedTokens > 0);
});

test('stops apply to accepted tokens in order: max_tokens, a stop token and a stop string end where they do without speculation', async () => {
  const off = await generate(DEMO, {}, PROMPTS, { maxTokens: 40 });
  // a token the transcripts produce midway, as a stop token: the request must end on its first occurrence
  const stopId = Number(off.tokenIds[0]!.split(',')[7]);
  for (const params of [{ maxTokens: 9 }, { maxTokens: 40, stopTokenIds: [stopId] }, { maxTokens: 40, stop: ['light'] },
    { maxTokens: 40, logprobs: 2 }]) {
    const a = await generate(DEMO, {}, PROMPTS, params);
    const b = await generate(DEMO, { speculativeConfig: SPEC }, PROMPTS, params);
    assert.deepEqual(b.tokenIds, a.tokenIds, JSON.stringify(params));
    assert.deepEqual(b.texts, a.texts, JSON.stringify(params));
    assert.deepEqual(b.finish, a.finish, JSON.stringify(params));
    assert.deepEqual(b.logprobs, a.logprobs, `${JSON.stringify(params)}: logprobs are the target's`);
    assert.ok(b.stats.specDecoding!.numAcceptedTokens > 0);
  }
});

test('sampled requests (temperature > 0) speculate too: seeded, the same output twice, max_tokens held', async () => {
  const params = { maxTokens: 30, temperature: 0.7, seed: 5, ignoreEos: true };
  const a = await generate(DEMO, { speculativeConfig: SPEC }, PROMPTS, params);
  const b = await generate(DEMO, { speculativeConfig: SPEC }, PROMPTS, params);
  assert.deepEqual(a.tokenIds, b.tokenIds);
  for (const t of a.tokenIds) assert.equal(t.split(',').length, 30);
  assert.ok(a.stats.specDecoding!.numDrafts > 0);
});

test('a mixture-of-experts model: greedy transcripts identical with speculation on and off', async () => {
  const moe = join(tmp, 'moe');
  await makeTestModel({ shape: 'tiny-qwen3-moe', outDir: moe, dtype: 'f32', seed: 3 });
  // random weights repeat themselves soon: proposals come and some are accepted
  const prompts = [[5, 6, 7, 5, 6, 7, 5, 6], [40, 41, 42, 43], [9, 9, 9, 9, 9]];
  const off = await generate(moe, {}, prompts, { maxTokens: 24, ignoreEos: true });
  for (const opts of [{}, { maxNumBatchedTokens: 5 }, { maxNumSeqs: 1 }]) {
    const on = await generate(moe, { speculativeConfig: { method: 'ngram', num_speculative_tokens: 3, prompt_lookup_min: 1, prompt_lookup_max: 3 }, ...opts },
      prompts, { maxTokens: 24, ignoreEos: true });
    assert.deepEqual(on.tokenIds, off.tokenIds, JSON.stringify(opts));
    assert.ok(on.stats.specDecoding!.numDrafts > 0);
  }
});

test('a hybrid model (gated DeltaNet): greedy transcripts identical with speculation on and off, rejected proposals undone '
  + 'from the state\'s backup, on every scheduling path', async () => {
  const hybrid = join(tmp, 'hybrid');
  await makeTestModel({ shape: 'tiny-qwen3.5', outDir: hybrid, dtype: 'f32', seed: 0 });
  // random weights repeat a few trigrams within 120 tokens: some proposals are accepted, most rejected
  const prompts = [[5, 6, 7], [9, 9, 9], [1, 2], [100]];
  const spec = { method: 'ngram', num_speculative_tokens: 3, prompt_lookup_min: 1, prompt_lookup_max: 3 };
  const off = await generate(hybrid, {}, prompts, { maxTokens: 120, ignoreEos: true });
  for (const opts of [{}, { maxNumBatchedTokens: 5 }, { maxNumSeqs: 1 }, { enablePrefixCaching: false },
    { kvCacheBytes: 400_000, maxModelLen: 128, blockSize: 16 }] as Partial<EngineOptions>[]) {
    const on = await generate(hybrid, { speculativeConfig: spec, ...opts }, prompts, { maxTokens: 120, ignoreEos: true });
    assert.deepEqual(on.tokenIds, off.tokenIds, JSON.stringify(opts));
    const s = on.stats.specDecoding!;
    // both the kept state (accepted proposals) and the restored one (rejected) are on the path checked
    assert.ok(s.numAcceptedTokens > 0 && s.numAcceptedTokens < s.numDraftTokens, `${JSON.stringify(opts)}: ${JSON.stringify(s)}`);
    if ('kvCacheBytes' in opts) assert.ok(on.stats.numPreemptions > 0, 'the small pool preempted nothing');
  }
});

test('a bad config is refused before anything loads', async () => {
  await assert.rejects(createEngineCore(engineOptions({ model: '/nonexistent', backend: 'cpu',
    speculativeConfig: { method: 'eagle', model: '/h', num_speculative_tokens: 3 } })), /method "eagle" is not supported yet/);
});

test('structured-output requests are not speculated (their grammar cannot take tokens back) and still follow it', async () => {
  const client = new InProcessEngineClient(await createEngineCore(engineOptions({ model: DEMO, backend: 'cpu', cpuThreads: 1,
    speculativeConfig: SPEC })));
  try {
    const ids: number[] = [];
    for await (const o of client.generate({ requestId: 'c', promptTokenIds: [11, 22, 11, 22, 11, 22], priority: 0, cacheSalt: null,
      arrivalTime: Date.now(), sampling: defaultSamplingParams({ maxTokens: 20, temperature: 0,
        structuredOutput: { type: 'choice', choices: ['light and light and light', 'darkness'] } }) })) ids.push(...o.newTokenIds);
    assert.ok(ids.length > 0);
    assert.equal(client.stats().specDecoding!.numDrafts, 0);
  } finally {
    await client.shutdown();
  }
});
