// Speculative decoding with an EAGLE-3 head ("method": "eagle3", "model": DIR) on the CPU backend, on tiny-llama-8l
// targets and heads make-test-model's eagle3 maker writes:
// - greedy transcripts are the same, token for token, with the head on or off, on every scheduling path (batching,
//   chunked prefill, prefix caching off, one sequence at a time, k = 1, preemption), whether the head is random (a
//   draft vocabulary of 384 mapped through d2t, vLLM's default target layers 2, 4, 5: nearly every proposal rejected)
//   or agrees with its target (engine/eagle3-helpers.ts: every proposal accepted, in fewer steps);
// - every proposal the engine makes is the one the head gives from scratch on the request's tokens (a fresh model: the
//   target over them, the head's catch-up over positions 0 .. n - 2, then its chained steps), on every path: the
//   carried target states, the head's chained hidden states and its K and V are right whatever was rejected, chunked
//   or preempted (the CPU backend is batch-invariant, so they are equal bit for bit);
// - a head that cannot run is refused at start-up, naming the field, file or flag.

import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Backend, DeviceGraphs } from '../../src/backend/backend.js';
import { CpuBackend } from '../../src/backend/cpu/cpu-backend.js';
import { buildForwardBatch } from '../../src/engine/batch-builder.js';
import { graphBuckets, headGraphKey } from '../../src/engine/runner/graph-buckets.js';
import { createEngineCore } from '../../src/engine/create-engine.js';
import { engineOptions, type EngineOptions } from '../../src/engine/options.js';
import { loadEagle3HeadDir } from '../../src/loader/eagle3-head.js';
import { loadModelDir } from '../../src/loader/model-dir.js';
import { Model } from '../../src/model/model.js';
import { makeTestModel } from '../../src/tools/make-test-model.js';
import { makeTestEagle3Head } from '../../src/tools/test-model/eagle3.js';
import { makeAgreeing } from './eagle3-helpers.js';
import { generate, recordMtpProposals } from './spec-helpers.js';

const PROMPTS = [[5, 6, 7, 8, 9, 10, 11], [40, 41, 42], [9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9],
  [300, 2, 17, 88, 130, 131, 132, 7, 200, 201, 64, 65]];
const PARAMS = { maxTokens: 24, ignoreEos: true };
/** tiny-llama-8l in f32: a page is 9 attention layers' K and V (the head's the ninth) of 16 tokens, 2 heads of 16. */
const PAGE_BYTES = 9 * 2 * 16 * 2 * 16 * 4;
const PATHS: Record<string, Partial<EngineOptions>> = {
  'batch of 4': {},
  'chunk 5 (chunked prefill; verify rows cut to the budget)': { maxNumBatchedTokens: 5 },
  'prefix cache off': { enablePrefixCaching: false },
  'one sequence at a time': { maxNumSeqs: 1 },
  // 7 usable pages for 4 requests of up to 3 pages each: requests are preempted and recomputed
  'tiny pool (preemption)': { kvCacheBytes: 8 * PAGE_BYTES, maxModelLen: 64, maxNumSeqs: 4 },
};

let tmp = '';
const dirs = { target: '', random: '', agreeTarget: '', agree: '' };
before(async () => {
  tmp = mkdtempSync(join(tmpdir(), 'quire-eagle3-'));
  for (const k of Object.keys(dirs) as (keyof typeof dirs)[]) dirs[k] = join(tmp, k);
  await makeTestModel({ shape: 'tiny-llama-8l', outDir: dirs.target, dtype: 'f32', seed: 3 });
  makeTestEagle3Head({ target: dirs.target, outDir: dirs.random, seed: 4, draftVocabSize: 384 });
  await makeTestModel({ shape: 'tiny-llama-8l', outDir: dirs.agreeTarget, dtype: 'f32', seed: 3 });
  makeTestEagle3Head({ target: dirs.agreeTarget, outDir: dirs.agree, seed: 4, auxLayerIds: [0, 3, 7] });
  await makeAgreeing(dirs.agreeTarget, dirs.agree);
});
after(() => rmSync(tmp, { recursive: true, force: true }));

const eagle3 = (model: string, k = 3) => ({ method: 'eagle3', model, num_speculative_tokens: k });

async function onAndOff(target: string, head: string, paths: Record<string, Partial<EngineOptions>>, check: (name: string,
  s: NonNullable<Awaited<ReturnType<typeof generate>>['stats']['specDecoding']>, steps: [number, number]) => void): Promise<void> {
  const off = await generate(target, {}, PROMPTS, PARAMS);
  for (const [name, opts] of Object.entries(paths)) {
    const on = await generate(target, { speculativeConfig: eagle3(head), ...opts }, PROMPTS, PARAMS);
    assert.deepEqual(on.tokenIds, off.tokenIds, `path "${name}" changed a transcript`);
    const s = on.stats.specDecoding!;
    assert.equal(s.numDraftFailures, 0, name);
    assert.ok(s.numDrafts > 0, `path "${name}": nothing proposed`);
    if (name.startsWith('tiny pool')) assert.ok(on.stats.numPreemptions > 0, 'the tiny pool preempted nothing');
    check(name, s, [on.stats.numSteps, off.stats.numSteps]);
  }
}

test('a random head (a draft vocabulary through d2t, vLLM\'s default layers): greedy transcripts identical on every path', async () => {
  await onAndOff(dirs.target, dirs.random, { ...PATHS, 'k = 1': { speculativeConfig: eagle3(dirs.random, 1) } },
    (name, s) => assert.ok(s.numAcceptedTokens < 0.2 * s.numDraftTokens, `${name}: ${s.numAcceptedTokens} of ${s.numDraftTokens}`));
});

test('a head that agrees with its target: greedy transcripts identical, nearly every proposal accepted, in fewer steps', async () => {
  await onAndOff(dirs.agreeTarget, dirs.agree, PATHS, (name, s, [on, off]) => {
    assert.ok(s.numAcceptedTokens >= 0.95 * s.numDraftTokens, `${name}: ${s.numAcceptedTokens} of ${s.numDraftTokens}`);
    if (name.startsWith('batch')) assert.ok(on < 0.5 * off, `${on} steps against ${off}`);
  });
});

/** The head's proposals after `known` tokens, from scratch on `backend`: the target, the catch-up, the chained steps. */
function eagle3Reference(target: string, head: string, backend: Backend): (known: number[], proposals: number[]) => number[] {
  const m = loadModelDir(target);
  const model = Model.load(m.config, m.weights, backend, { eagle3: loadEagle3HeadDir(head) });
  model.allocateEagle3Carry(256);
  backend.allocateKvCache(model.kvCacheSpec(16, 16));
  const blockTable = Array.from({ length: 15 }, (_, i) => i + 1);
  return (known, proposals) => {
    const n = known.length;
    model.forwardTokens(buildForwardBatch([{ tokenIds: known, startPosition: 0, blockTable, sample: true }], 16));
    const catchUp = buildForwardBatch([{ tokenIds: known.slice(1), startPosition: 0, blockTable, sample: true }], 16);
    const out = [model.eagle3Tokens({ ...catchUp, carryRows: Int32Array.from({ length: n - 1 }, (_, t) => t) }, 'target')[0]!];
    for (let j = 1; j < proposals.length; j++) {
      const step = buildForwardBatch([{ tokenIds: [proposals[j - 1]!], startPosition: n - 2 + j, blockTable, sample: true }], 16);
      out.push(model.eagle3Tokens({ ...step, carryRows: Int32Array.from([j === 1 ? n - 2 : 0]) }, 'head')[0]!);
    }
    return out;
  };
}

/** Every proposal a path made (at least one) is the reference's from scratch on the request's tokens. */
function checkFromScratch(name: string, made: { known: number[]; proposals: number[] }[],
  reference: (known: number[], proposals: number[]) => number[]): void {
  assert.ok(made.length > 0, name);
  for (const m of made) assert.deepEqual(m.proposals, reference(m.known, m.proposals), `path "${name}", after ${m.known.join(',')}`);
}

test('every proposal is the head\'s from scratch on the request\'s tokens, on every path', async () => {
  const proposals = recordMtpProposals();
  const backend = new CpuBackend({ kvCacheBytes: 1 << 24, numThreads: 1 });
  try {
    for (const [target, head] of [[dirs.target, dirs.random], [dirs.agreeTarget, dirs.agree]] as const) {
      const reference = eagle3Reference(target, head, backend);
      await onAndOff(target, head, PATHS, (name) => checkFromScratch(name, proposals.take(), reference));
    }
  } finally {
    proposals.stop();
    backend.dispose();
  }
});

test('QUIRE_SPEC_HEAD_GRAPHS=1: the chained forwards through graphs (a DeviceGraphs that runs each record on the CPU): padded to their buckets under head keys, the proposals from scratch', async () => {
  const runs: { key: number; numSeqs: number; numCarryRows: number }[] = [];
  const graphs: DeviceGraphs = { numCaptures: 0, captureMs: 0, launch: () => null,
    run: (key, batch, record) => {
      runs.push({ key, numSeqs: batch.numSeqs, numCarryRows: batch.carryRows?.length ?? 0 });
      return record();
    } };
  const proposals = recordMtpProposals();
  const backend = new CpuBackend({ kvCacheBytes: 1 << 24, numThreads: 1 });
  const reference = eagle3Reference(dirs.target, dirs.random, backend);
  Object.defineProperty(CpuBackend.prototype, 'graphs', { get: () => graphs, configurable: true });
  const knob = process.env.QUIRE_SPEC_HEAD_GRAPHS;
  process.env.QUIRE_SPEC_HEAD_GRAPHS = '1';
  try {
    await onAndOff(dirs.target, dirs.random, { 'batch of 4': {}, 'one sequence at a time': { maxNumSeqs: 1 } },
      (name) => checkFromScratch(name, proposals.take(), reference));
  } finally {
    delete (CpuBackend.prototype as { graphs?: DeviceGraphs }).graphs;
    if (knob === undefined) delete process.env.QUIRE_SPEC_HEAD_GRAPHS;
    else process.env.QUIRE_SPEC_HEAD_GRAPHS = knob;
    proposals.stop();
    backend.dispose();
  }
  const head = runs.filter((r) => r.key <= headGraphKey(1));
  for (const r of head) {
    const bucket = headGraphKey(0) - r.key;
    assert.deepEqual([r.numSeqs, r.numCarryRows], [bucket, bucket]);
  }
  // at start-up every bucket of each engine (--max-num-seqs 256, then 1); then the run's forwards, of 1 to 4 rows
  const buckets = (n: number) => graphBuckets(n).map((b) => headGraphKey(b)).sort();
  assert.deepEqual(head.slice(0, buckets(256).length).map((r) => r.key).sort(), buckets(256));
  const startUp = graphBuckets(256).filter((b) => b <= 4).length + 1;
  assert.ok(head.filter((r) => r.numSeqs <= 4).length > startUp, 'no chained forward of the run went through the graphs');
});

test('sampled requests run with the head', async () => {
  const sampled = await generate(dirs.agreeTarget, { speculativeConfig: eagle3(dirs.agree) }, PROMPTS, { ...PARAMS, temperature: 0.8, seed: 5 });
  for (const t of sampled.tokenIds) assert.equal(t.split(',').length, 24);
  assert.ok(sampled.stats.specDecoding!.numDrafts > 0);
  assert.equal(sampled.stats.specDecoding!.numDraftFailures, 0);
});

test('a head that cannot run is refused at start-up, naming the field, file or flag', async () => {
  const refused = async (head: string, why: RegExp, opts: Partial<EngineOptions> = {}, target = dirs.target) =>
    assert.rejects(createEngineCore(engineOptions({ model: target, backend: 'cpu', speculativeConfig: eagle3(head), ...opts })), why);
  await refused(join(tmp, 'nowhere'), /--speculative-config: method "eagle3": model .*nowhere: config\.json: not found/);
  const other = join(tmp, 'other-target');
  await makeTestModel({ shape: 'tiny-qwen3', outDir: other, dtype: 'f32', seed: 0 });
  await refused(dirs.random, /method "eagle3": model .*random: vLLM's default eagle_aux_hidden_state_layer_ids \(2, 1, -1\) name layers outside the target's 2/,
    {}, other);
  await refused(dirs.random, /method "eagle3": the head runs on one device; --tensor-parallel-size is 2/, { tensorParallelSize: 2 });
  await refused(dirs.random, /method "eagle3": the head runs on one device; --pipeline-parallel-size is 2 \(pipeline parallelism and EAGLE-3/,
    { pipelineParallelSize: 2 });
});
