// Speculative decoding with the target's own multi-token-prediction head ("method": "mtp") on the CPU backend, on tiny
// hybrid models whose checkpoints carry one (make-test-model writes mtp.* where the config declares it):
// - greedy transcripts are the same, token for token, with the head on or off, on every scheduling path (batching,
//   chunked prefill, prefix caching off, one sequence at a time, k = 1, preemption), whether the head disagrees with
//   the target (random weights: nearly every proposal rejected, so the DeltaNet states roll back every step), agrees
//   with it (a target whose mixers and MLPs add nothing predicts from its last token alone, and a head made to compute
//   that function of its input token: every proposal accepted) or half agrees;
// - every proposal the engine makes is the one the head gives when run from scratch on the request's tokens (a fresh
//   model: the target over them, the head's catch-up over positions 0 .. n - 2, then its recurrent steps): the
//   catch-up after each step, the carried hidden states and the head's K and V are right whatever was rejected, chunked
//   or preempted (the CPU backend is batch-invariant, so they are equal bit for bit);
// - the mixture-of-experts families (Qwen3.5-MoE, Qwen3-Next: the head's layer sparse) the same;
// - a target without a head is refused at start-up naming the field or tensor.

import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CpuBackend } from '../../src/backend/cpu/cpu-backend.js';
import { createEngineCore } from '../../src/engine/create-engine.js';
import { engineOptions, type EngineOptions } from '../../src/engine/options.js';
import { defaultModelDir } from '../../src/loader/default-model.js';
import { makeTestModel } from '../../src/tools/make-test-model.js';
import { agreeingHead, editCheckpoint, generate, mtpReference, recordMtpProposals } from './spec-helpers.js';

const MTP = { method: 'mtp', num_speculative_tokens: 3 };
const PROMPTS = [[5, 6, 7, 8, 9, 10, 11], [40, 41, 42], [9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9],
  [300, 2, 17, 88, 130, 131, 132, 7, 200, 201, 64, 65]];
const PARAMS = { maxTokens: 24, ignoreEos: true };
/**
 * tiny-qwen3.5 in f32: a page is 3 attention layers' K and V (the head's is the third) of 16 tokens, 2 heads of 16; a
 * state slot 2 DeltaNet layers' (hybrid-engine.test.ts). 4 sequences: 4 slots, 4 backups, 4 saved for the prefix cache.
 */
const PAGE_BYTES = 3 * 2 * 16 * 2 * 16 * 4;
const SLOT_BYTES = 2 * 4 * (3 * 96 + 4 * 16 * 8);
const PATHS: Record<string, Partial<EngineOptions>> = {
  'batch of 4': {},
  'chunk 5 (chunked prefill; verify rows cut to the budget)': { maxNumBatchedTokens: 5 },
  'prefix cache off': { enablePrefixCaching: false },
  'one sequence at a time': { maxNumSeqs: 1 },
  // 7 usable pages for 4 requests of up to 3 pages each: requests are preempted and recomputed
  'tiny pool (preemption)': { kvCacheBytes: 8 * PAGE_BYTES + 12 * SLOT_BYTES, maxModelLen: 64, maxNumSeqs: 4 },
};

let tmp = '';
const dirs = { random: '', agree: '', half: '', moe: '', next: '' };
before(async () => {
  tmp = mkdtempSync(join(tmpdir(), 'quire-mtp-'));
  for (const [name, shape] of [['random', 'tiny-qwen3.5'], ['agree', 'tiny-qwen3.5'], ['half', 'tiny-qwen3.5'],
    ['moe', 'tiny-qwen3.5-moe'], ['next', 'tiny-qwen3-next']] as const) {
    dirs[name] = join(tmp, name);
    await makeTestModel({ shape, outDir: dirs[name], dtype: 'f32', seed: 3 });
  }
  await editCheckpoint(dirs.agree, agreeingHead(0));
  await editCheckpoint(dirs.half, agreeingHead(0.2, 0.5));
});
after(() => rmSync(tmp, { recursive: true, force: true }));

async function onAndOff(dir: string, paths: Record<string, Partial<EngineOptions>>, check: (name: string,
  s: NonNullable<Awaited<ReturnType<typeof generate>>['stats']['specDecoding']>, steps: [number, number]) => void): Promise<void> {
  const off = await generate(dir, {}, PROMPTS, PARAMS);
  assert.equal(off.stats.specDecoding, undefined);
  for (const [name, opts] of Object.entries(paths)) {
    const on = await generate(dir, { speculativeConfig: MTP, ...opts }, PROMPTS, PARAMS);
    assert.deepEqual(on.tokenIds, off.tokenIds, `path "${name}" changed a transcript`);
    const s = on.stats.specDecoding!;
    assert.equal(s.numDraftFailures, 0, name);
    assert.ok(s.numDrafts > 0, `path "${name}": nothing proposed`);
    if (name.startsWith('tiny pool')) assert.ok(on.stats.numPreemptions > 0, 'the tiny pool preempted nothing');
    check(name, s, [on.stats.numSteps, off.stats.numSteps]);
  }
}

test('a random head (nearly every proposal rejected, the states rolled back): greedy transcripts identical on every path', async () => {
  await onAndOff(dirs.random, { ...PATHS, 'k = 1': { speculativeConfig: { ...MTP, num_speculative_tokens: 1 } } },
    (name, s) => assert.ok(s.numAcceptedTokens < 0.2 * s.numDraftTokens, `${name}: ${s.numAcceptedTokens} of ${s.numDraftTokens}`));
});

test('a head that agrees with its target: greedy transcripts identical, every proposal accepted, in fewer steps', async () => {
  await onAndOff(dirs.agree, PATHS, (name, s, [on, off]) => {
    // a near-tie of the two norms' rounding may flip one
    assert.ok(s.numAcceptedTokens >= 0.95 * s.numDraftTokens, `${name}: ${s.numAcceptedTokens} of ${s.numDraftTokens}`);
    if (name.startsWith('batch')) assert.ok(on < 0.5 * off, `${on} steps against ${off}`);
  });
});

test('every proposal is the head\'s from scratch on the request\'s tokens, on every path (a head half agreeing: accepted and rejected)', async () => {
  const made = recordMtpProposals();
  const backend = new CpuBackend({ kvCacheBytes: 1 << 24, numThreads: 1 });
  const reference = mtpReference(dirs.half, backend);
  try {
    let accepted = 0;
    let drafted = 0;
    await onAndOff(dirs.half, PATHS, (name, s) => {
      accepted += s.numAcceptedTokens;
      drafted += s.numDraftTokens;
      for (const m of made.take()) assert.deepEqual(m.proposals, reference(m.known, m.proposals), `path "${name}", after ${m.known.join(',')}`);
    });
    assert.ok(accepted > 0.1 * drafted && accepted < 0.9 * drafted, `${accepted} of ${drafted} accepted`);
  } finally {
    made.stop();
    backend.dispose();
  }
});

test('the mixture-of-experts families (the head\'s layer sparse): greedy transcripts identical', async () => {
  for (const dir of [dirs.moe, dirs.next]) {
    await onAndOff(dir, { 'batch of 4': {}, 'chunk 5': { maxNumBatchedTokens: 5 } }, () => {});
  }
});

test('sampled requests run with the head; vLLM\'s older method names are the same method', async () => {
  const sampled = await generate(dirs.agree, { speculativeConfig: { ...MTP, method: 'qwen3_5_mtp' } }, PROMPTS,
    { ...PARAMS, temperature: 0.8, seed: 5 });
  for (const t of sampled.tokenIds) assert.equal(t.split(',').length, 24);
  assert.ok(sampled.stats.specDecoding!.numDrafts > 0);
  assert.equal(sampled.stats.specDecoding!.numDraftFailures, 0);
});

test('a target without an MTP head is refused at start-up, naming the field or tensor', async () => {
  const refused = async (model: string, why: RegExp, opts: Partial<EngineOptions> = {}) =>
    assert.rejects(createEngineCore(engineOptions({ model, backend: 'cpu', speculativeConfig: MTP, ...opts })), why);
  await refused(defaultModelDir(), /--speculative-config: method "mtp": qwen3 checkpoints carry no multi-token-prediction head/);
  const bare = join(tmp, 'bare');
  await makeTestModel({ shape: 'tiny-qwen3.5', outDir: bare, dtype: 'f32', seed: 0 });
  await editCheckpoint(bare, (name) => !name.startsWith('mtp.'));
  await refused(bare, /the checkpoint has no MTP head \(no mtp\.\* tensors: mtp\.fc\.weight is missing; mtp_num_hidden_layers is 1\)/);
  const config = JSON.parse(readFileSync(join(bare, 'config.json'), 'utf8')) as Record<string, unknown>;
  writeFileSync(join(bare, 'config.json'), JSON.stringify({ ...config, mtp_num_hidden_layers: 0 }));
  await refused(bare, /the checkpoint has no MTP head \(mtp_num_hidden_layers is 0\)/);
  writeFileSync(join(bare, 'config.json'), JSON.stringify({ ...config, mtp_num_hidden_layers: 2 }));
  await refused(bare, /mtp_num_hidden_layers is 2; Quire runs an MTP head of one layer/);
  await refused(dirs.random, /method "mtp": the head runs on one device; --tensor-parallel-size is 2/, { tensorParallelSize: 2 });
  await refused(dirs.random, /method "mtp": the head runs on one device; --pipeline-parallel-size is 2 \(pipeline parallelism and MTP/,
    { pipelineParallelSize: 2 });
});
