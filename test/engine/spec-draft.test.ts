// Speculative decoding with a draft model on the CPU backend: a greedy transcript must be the same, token for token,
// with the draft on or off, on every scheduling path (batching, chunked prefill, prefix caching, preemption), whether
// the draft agrees with the target (the demo model as its own draft: nearly every proposal accepted) or not (a
// random model of the target's shape and tokenizer); a draft with another vocabulary or a hybrid draft is refused at
// start-up naming the field.

import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createEngineCore } from '../../src/engine/create-engine.js';
import { engineOptions, type EngineOptions } from '../../src/engine/options.js';
import { makeTestModel } from '../../src/tools/make-test-model.js';
import { defaultModelDir } from '../../src/loader/default-model.js';
import { generate } from './spec-helpers.js';

const DEMO = defaultModelDir();
// batches speculate too here (a draft's default disable_by_batch_size is 2: only one running request would)
const SELF = { method: 'draft_model', model: DEMO, num_speculative_tokens: 3, disable_by_batch_size: 64 };
const PROMPTS = [
  'And God said, Let there be light: and there was light.',
  'In the beginning God created the heaven and the earth. And the earth was without form',
  'The LORD is my shepherd; I shall not want.',
  'And he said unto them, Go ye into all the world.',
];

let tmp = '';
before(() => {
  tmp = mkdtempSync(join(tmpdir(), 'quire-draft-'));
});
after(() => rmSync(tmp, { recursive: true, force: true }));

test('the target as its own draft: greedy transcripts identical on every scheduling path, nearly every proposal accepted', async () => {
  const off = await generate(DEMO, {}, PROMPTS, { maxTokens: 32 });
  const paths: Record<string, Partial<EngineOptions>> = {
    'batch of 4': {},
    'chunk 7 (chunked prefill; the draft catches up 7 tokens a forward)': { maxNumBatchedTokens: 7 },
    'prefix cache off': { enablePrefixCaching: false },
    'one sequence at a time': { maxNumSeqs: 1 },
    'k = 1': { speculativeConfig: { ...SELF, num_speculative_tokens: 1 } },
    // 8 pages of 16 tokens, each page holding the target's and the draft's K and V (2 x 5120 bytes a token)
    'tiny pool (preemption)': { kvCacheBytes: 8 * 16 * 2 * 5120, maxModelLen: 96, blockSize: 16 },
  };
  for (const [name, opts] of Object.entries(paths)) {
    const on = await generate(DEMO, { speculativeConfig: SELF, ...opts }, PROMPTS, { maxTokens: 32 });
    assert.deepEqual(on.tokenIds, off.tokenIds, `path "${name}" changed a transcript`);
    const s = on.stats.specDecoding!;
    assert.equal(s.numDraftFailures, 0);
    // the same weights on the same backend: only a near-tie computed in another chunk shape may disagree
    assert.ok(s.numAcceptedTokens >= 0.9 * s.numDraftTokens, `path "${name}": ${s.numAcceptedTokens} of ${s.numDraftTokens} accepted`);
    if (name.startsWith('tiny pool')) assert.ok(on.stats.numPreemptions > 0, 'the tiny pool preempted nothing');
    if (name.startsWith('batch')) assert.ok(on.stats.numSteps < 0.5 * off.stats.numSteps, `${on.stats.numSteps} steps against ${off.stats.numSteps}`);
  }
});

test('a draft that disagrees (a random model, the target\'s tokenizer) changes no greedy transcript; sampled requests run', async () => {
  const [target, draft] = [join(tmp, 'target'), join(tmp, 'draft')];
  await makeTestModel({ shape: 'tiny-qwen3', outDir: target, dtype: 'f32', seed: 1 });
  await makeTestModel({ shape: 'tiny-qwen3', outDir: draft, dtype: 'f32', seed: 2 });
  const prompts = [[5, 6, 7, 5, 6, 7, 5, 6], [40, 41, 42, 43], [9, 9, 9, 9, 9]];
  const spec = { method: 'draft_model', model: draft, num_speculative_tokens: 4, disable_by_batch_size: 64 };
  const off = await generate(target, {}, prompts, { maxTokens: 24, ignoreEos: true });
  for (const opts of [{}, { maxNumBatchedTokens: 5 }, { maxNumSeqs: 1 }]) {
    const on = await generate(target, { speculativeConfig: spec, ...opts }, prompts, { maxTokens: 24, ignoreEos: true });
    assert.deepEqual(on.tokenIds, off.tokenIds, JSON.stringify(opts));
    assert.ok(on.stats.specDecoding!.numDrafts > 0);
  }
  const sampled = await generate(target, { speculativeConfig: spec }, prompts, { maxTokens: 24, ignoreEos: true, temperature: 0.8, seed: 3 });
  for (const t of sampled.tokenIds) assert.equal(t.split(',').length, 24);
});

test('chained proposal forwards (QUIRE_DRAFT_CHAIN=1): the same transcripts, every proposal as without', async () => {
  const plain = await generate(DEMO, { speculativeConfig: SELF }, PROMPTS, { maxTokens: 24 });
  process.env.QUIRE_DRAFT_CHAIN = '1';
  try {
    const chained = await generate(DEMO, { speculativeConfig: SELF }, PROMPTS, { maxTokens: 24 });
    assert.deepEqual(chained.tokenIds, plain.tokenIds);
    assert.deepEqual(chained.stats.specDecoding, plain.stats.specDecoding);
  } finally {
    delete process.env.QUIRE_DRAFT_CHAIN;
  }
});

test('a request may opt out (speculative_decoding: false): no proposals for it, the same transcript', async () => {
  const off = await generate(DEMO, {}, PROMPTS.slice(0, 2), { maxTokens: 16 });
  const out = await generate(DEMO, { speculativeConfig: SELF }, PROMPTS.slice(0, 2), { maxTokens: 16, speculativeDecoding: false });
  assert.deepEqual(out.tokenIds, off.tokenIds);
  assert.equal(out.stats.specDecoding!.numDrafts, 0);
});

test('a draft with another vocabulary, or a hybrid draft, is refused at start-up naming the field', async () => {
  const tiny = join(tmp, 'tiny');
  await makeTestModel({ shape: 'tiny-qwen3', outDir: tiny, dtype: 'f32', seed: 0 });
  await assert.rejects(createEngineCore(engineOptions({ model: DEMO, backend: 'cpu',
    speculativeConfig: { method: 'draft_model', model: tiny, num_speculative_tokens: 2 } })),
  /--speculative-config: draft model .*tiny: vocab_size: the draft's is \d+, the target's 6144/);
  const hybrid = join(tmp, 'hybrid');
  await makeTestModel({ shape: 'tiny-qwen3.5', outDir: hybrid, dtype: 'f32', seed: 0 });
  await assert.rejects(createEngineCore(engineOptions({ model: tiny, backend: 'cpu',
    speculativeConfig: { method: 'draft_model', model: hybrid, num_speculative_tokens: 2 } })),
  /draft model .*hybrid: model: a hybrid \(qwen3_5\) draft's recurrent state cannot be rolled back yet/);
});
