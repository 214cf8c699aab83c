// A hybrid linear-attention model (tiny Qwen3.5: gated DeltaNet + gated attention, CPU, f32) in the engine: its
// recurrent state is a slot per running sequence, carried across prompt chunks and dropped on preemption, so a
// greedy transcript depends only on the model and the prompt, never on batching, chunking or preemption; slots come
// back on finish and abort; prefix caching is off (a hit would skip the prompt's state).

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createEngineCore } from '../../src/engine/engine-core.js';
import { LLM } from '../../src/engine/llm.js';
import { engineOptions, type EngineOptions } from '../../src/engine/options.js';
import type { EngineStats } from '../../src/engine/types.js';
import { defaultSamplingParams } from '../../src/sampling/params.js';
import { makeTestModel } from '../../src/tools/make-test-model.js';
import { sharedPrefixPrompts } from './helpers.js';

let dir = '';
const prompts: number[][] = [];
const MAX_TOKENS = 12;
/** tiny-qwen3.5: a page is K and V of 2 attention layers (2 heads x 16, f32); a slot 2 DeltaNet layers' states. */
const PAGE_BYTES = 2 * 16 * 2 * 16 * 4 * 2;
const SLOT_BYTES = 2 * 4 * (3 * 96 + 4 * 16 * 8);

before(async () => {
  dir = mkdtempSync(join(tmpdir(), 'quire-hybrid-'));
  await makeTestModel({ shape: 'tiny-qwen3.5', outDir: dir, dtype: 'f32', seed: 3 });
  prompts.push(...sharedPrefixPrompts(4242, 9, 60, 3));
});
after(() => rmSync(dir, { recursive: true, force: true }));

async function run(opts: Partial<EngineOptions>, which: number[]): Promise<{ t: string[]; stats: EngineStats }> {
  const llm = new LLM(dir, { backend: 'cpu', cpuThreads: 1, ...opts });
  try {
    const out = await llm.generate(which.map((i) => prompts[i]!), { maxTokens: MAX_TOKENS, temperature: 0, ignoreEos: true });
    return { t: out.map((c) => c.tokenIds.join(',')), stats: await llm.stats() };
  } finally {
    await llm.close();
  }
}

test('hybrid: greedy transcripts identical alone, batched, chunked and preempted; every state slot back at the end',
  async () => {
    const all = prompts.map((_, i) => i);
    const alone: string[] = [];
    for (const i of all) alone.push(...(await run({}, [i])).t);
    const paths: Record<string, Partial<EngineOptions>> = {
      'batch of 9': {},
      'chunk 5': { maxNumBatchedTokens: 5 },
      'chunk 7, 3 seqs': { maxNumBatchedTokens: 7, maxNumSeqs: 3 },
      // 8 pages of 16 tokens after 4 slots: the running set cannot all fit, so requests are preempted and recomputed
      'tiny pool (preemption)': { maxNumSeqs: 4, kvCacheBytes: 4 * SLOT_BYTES + 8 * PAGE_BYTES, maxModelLen: 128 },
    };
    const stats = new Map<string, EngineStats>();
    for (const [name, opts] of Object.entries(paths)) {
      const r = await run(opts, all);
      stats.set(name, r.stats);
      assert.deepEqual(r.t, alone, `path "${name}" changed a transcript`);
      assert.equal(r.stats.numFreeStateSlots, r.stats.numTotalStateSlots, `path "${name}" leaked a state slot`);
    }
    assert.ok(stats.get('tiny pool (preemption)')!.numPreemptions > 0, 'the tiny pool preempted nothing');
    assert.equal(stats.get('tiny pool (preemption)')!.numTotalStateSlots, 4);
    assert.equal(stats.get('batch of 9')!.numTotalStateSlots, 256, 'one slot a sequence the engine may run');
  });

test('hybrid: a state slot is taken on admission, kept across prompt chunks, and freed on finish and on abort', async () => {
  const core = await createEngineCore(engineOptions({ model: dir, backend: 'cpu', cpuThreads: 1, maxNumSeqs: 2,
    maxNumBatchedTokens: 8 }));
  try {
    assert.deepEqual([core.info.numStateSlots, core.info.bytesPerStateSlot, core.stats().numFreeStateSlots], [2, SLOT_BYTES, 2]);
    const add = (requestId: string, promptTokenIds: number[]) => core.addRequest({ requestId, promptTokenIds,
      sampling: defaultSamplingParams({ temperature: 0, maxTokens: 3, ignoreEos: true }), arrivalTime: 0, priority: 0,
      cacheSalt: null });
    add('a', prompts[0]!);  // 40 tokens and more: chunks of 8
    add('b', prompts[1]!);
    core.step();
    const slotOfA = core.kv.stateSlot('a');
    assert.ok(slotOfA >= 0);
    assert.deepEqual([core.kv.stateSlot('b'), core.stats().numFreeStateSlots], [-1, 1], 'a took one, b had no budget left');
    core.step();
    assert.equal(core.kv.stateSlot('a'), slotOfA, 'a keeps its slot across its prompt chunks');
    assert.equal(core.stats().numFreeStateSlots, 1);
    core.abortRequest('a');
    assert.deepEqual([core.kv.stateSlot('a'), core.stats().numFreeStateSlots], [-1, 2], 'abort frees it');
    core.step();
    assert.deepEqual([core.kv.stateSlot('b') >= 0, core.stats().numFreeStateSlots], [true, 1]);
    while (core.hasWork()) core.step();
    assert.deepEqual([core.stats().numFreeStateSlots, core.stats().numFreeBlocks], [2, core.info.numBlocks - 1],
      'finishing frees it');
  } finally {
    core.dispose();
  }
});

test('hybrid: prefix caching is off, so a repeated prompt takes no cache hit and gives the same tokens', async () => {
  const same = [0, 0, 3, 3];
  const r = await run({ maxNumSeqs: 1, enablePrefixCaching: true }, same);
  assert.deepEqual([r.stats.prefixCacheQueries, r.stats.prefixCacheHits], [0, 0]);
  assert.equal(r.t[0], r.t[1]);
  assert.equal(r.t[2], r.t[3]);
});
