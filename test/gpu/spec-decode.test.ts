// n-gram and draft-model speculative decoding on CUDA with the bundled demo model (trained: its n-gram proposals get
// accepted; as its own draft nearly all are, the draft a second CUDA backend on the same device). In the
// batch-invariant mode a verify step's rows have the bits of one-token decode steps, so greedy transcripts are
// identical with speculation on and off; in the default mode the k + 1 rows of a verify step take the prompt-chunk
// GEMMs and attention, so the transcripts are printed (their md5s), and acceptance is checked to happen.

import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { LLM } from '../../src/engine/llm.js';
import { transcriptMd5 } from '../../src/lab/gate-transcript.js';
import { defaultModelDir } from '../../src/loader/default-model.js';
import { noCuda } from './cuda-helpers.js';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { makeTestModel } from '../../src/tools/make-test-model.js';

const PROMPTS = [
  'And God said, Let there be light: and there was light. And God said, Let there be light: and there was',
  'In the beginning God created the heaven and the earth. And the earth was without form',
  'The LORD is my shepherd; I shall not want. He maketh me to lie down in green pastures',
  'And he said unto them, Go ye into all the world. And he said unto them,',
];
const SPEC = { method: 'ngram', num_speculative_tokens: 4, prompt_lookup_min: 2, prompt_lookup_max: 4 };

const DRAFT = { method: 'draft_model', model: defaultModelDir(), num_speculative_tokens: 3, disable_by_batch_size: 64 };

describe('speculative decoding on CUDA', { skip: noCuda }, () => {
  const run = async (batchInvariant: boolean, spec: boolean | object) => {
    const llm = new LLM(defaultModelDir(), { backend: 'cuda', batchInvariant, maxModelLen: 512,
      ...(spec ? { speculativeConfig: spec === true ? SPEC : spec } : {}) });
    try {
      const out = await llm.generate(PROMPTS, { maxTokens: 64, temperature: 0, ignoreEos: true });
      return { t: out.map((c) => c.tokenIds), stats: await llm.stats() };
    } finally {
      await llm.close();
    }
  };

  for (const batchInvariant of [true, false]) {
    test(`greedy, ${batchInvariant ? 'batch-invariant mode: identical transcripts' : 'default mode'} with speculation on and off; proposals accepted`, async () => {
      const off = await run(batchInvariant, false);
      const on = await run(batchInvariant, true);
      const accepted = on.stats.specDecoding?.numAcceptedTokens ?? 0;
      console.log(`# transcript md5 off ${transcriptMd5(off.t)} on ${transcriptMd5(on.t)}  demo cuda-bf16` +
        `${batchInvariant ? ' batch-invariant' : ''}; ${accepted} of ${on.stats.specDecoding?.numDraftTokens ?? 0} drafts accepted`);
      assert.ok(accepted > 0, 'no proposal accepted');
      if (batchInvariant) assert.deepEqual(on.t, off.t);
    });
  }

  for (const batchInvariant of [true, false]) {
    test(`the demo model as its own draft, greedy, ${batchInvariant ? 'batch-invariant mode: identical transcripts' : 'default mode'}; nearly every proposal accepted`, async () => {
      const off = await run(batchInvariant, false);
      const on = await run(batchInvariant, DRAFT);
      const s = on.stats.specDecoding!;
      console.log(`# transcript md5 off ${transcriptMd5(off.t)} draft ${transcriptMd5(on.t)}  demo cuda-bf16` +
        `${batchInvariant ? ' batch-invariant' : ''}; ${s.numAcceptedTokens} of ${s.numDraftTokens} drafts accepted, ` +
        `${on.stats.numSteps} steps against ${off.stats.numSteps}`);
      assert.equal(s.numDraftFailures, 0);
      // greedy rows of 3 proposals each: verify steps of 4 tokens a row replay graphs of their own
      assert.ok(on.stats.numGraphCaptures > off.stats.numGraphCaptures,
        `${on.stats.numGraphCaptures} graphs captured with the draft, ${off.stats.numGraphCaptures} without`);
      // the draft computes in bf16 on one-token and chunk shapes the verify step does not share: near-ties may differ
      assert.ok(s.numAcceptedTokens >= 0.8 * s.numDraftTokens, `${s.numAcceptedTokens} of ${s.numDraftTokens} accepted`);
      if (batchInvariant) assert.deepEqual(on.t, off.t);
    });
  }

  test('the draft\'s proposal forwards chained on the device (QUIRE_DRAFT_CHAIN=1), batch-invariant mode: the same transcripts and proposals', async () => {
    const plain = await run(true, DRAFT);
    process.env.QUIRE_DRAFT_CHAIN = '1';
    try {
      const chained = await run(true, DRAFT);
      console.log(`# transcript md5 chained ${transcriptMd5(chained.t)} plain ${transcriptMd5(plain.t)}`);
      assert.deepEqual(chained.t, plain.t);
      assert.deepEqual(chained.stats.specDecoding, plain.stats.specDecoding);
    } finally {
      delete process.env.QUIRE_DRAFT_CHAIN;
    }
  });

  test('a hybrid model (tiny-qwen3.5-128), batch-invariant mode: n-gram speculation changes no transcript; rejected proposals restored from the state backups', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'quire-gpu-spec-hybrid-'));
    try {
      await makeTestModel({ shape: 'tiny-qwen3.5-128', outDir: dir, dtype: 'bf16', seed: 0 });
      const gen = async (spec: boolean) => {
        const llm = new LLM(dir, { backend: 'cuda', batchInvariant: true, maxModelLen: 512,
          ...(spec ? { speculativeConfig: { method: 'ngram', num_speculative_tokens: 3, prompt_lookup_min: 1, prompt_lookup_max: 3 } } : {}) });
        try {
          const out = await llm.generate([[5, 6, 7], [9, 9, 9], [1, 2], [100]], { maxTokens: 120, temperature: 0, ignoreEos: true });
          return { t: out.map((c) => c.tokenIds), stats: await llm.stats() };
        } finally {
          await llm.close();
        }
      };
      const off = await gen(false);
      const on = await gen(true);
      const s = on.stats.specDecoding!;
      console.log(`# transcript md5 off ${transcriptMd5(off.t)} on ${transcriptMd5(on.t)}  tiny-qwen3.5-128 batch-invariant; ${s.numAcceptedTokens} of ${s.numDraftTokens} accepted`);
      assert.ok(s.numDraftTokens > s.numAcceptedTokens, 'no proposal was rejected: the restore went untested');
      assert.deepEqual(on.t, off.t);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
