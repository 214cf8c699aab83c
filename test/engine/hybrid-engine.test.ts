// A hybrid linear-attention model (tiny Qwen3.5: gated DeltaNet + gated attention, CPU, f32) in the engine: its
// recurrent state is a slot per running sequence, carried across prompt chunks and dropped on preemption, so a
// greedy transcript depends only on the model and the prompt, never on batching, chunking or preemption; slots come
// back on finish and abort. With prefix caching a hit restores the state saved at the end of its last page, and
// gives exactly the tokens a miss gives.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createEngineCore } from '../../src/engine/create-engine.js';
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
/** Prompts sharing a 72-token prefix (4.5 pages), and follow-ups extending whole prompts (a multi-turn chat). */
const sharedPages: number[][] = [];

before(async () => {
  dir = mkdtempSync(join(tmpdir(), 'quire-hybrid-'));
  await makeTestModel({ shape: 'tiny-qwen3.5', outDir: dir, dtype: 'f32', seed: 3 });
  prompts.push(...sharedPrefixPrompts(4242, 9, 60, 3));
  const shared = Array.from({ length: 72 }, (_, i) => (i * 37 + 11) % 400);
  const tail = (n: number, seed: number) => Array.from({ length: n }, (_, i) => (i * 53 + seed) % 400);
  sharedPages.push([...shared, ...tail(10, 1)], [...shared, ...tail(21, 2)], [...shared, ...tail(10, 1), ...tail(30, 3)],
    tail(20, 4), [...shared, ...tail(21, 2), ...tail(5, 5)], [...shared, ...tail(3, 6)]);
});
after(() => rmSync(dir, { recursive: true, force: true }));

async function run(opts: Partial<EngineOptions>, which: number[], set = prompts): Promise<{ t: string[]; stats: EngineStats }> {
  const llm = new LLM(dir, { backend: 'cpu', cpuThreads: 1, ...opts });
  try {
    const out = await llm.generate(which.map((i) => set[i]!), { maxTokens: MAX_TOKENS, temperature: 0, ignoreEos: true });
    return { t: out.map((c) => c.tokenIds.join(',')), stats: await llm.stats() };
  } finally {
    await llm.close();
  }
}

test('hybrid: greedy transcripts identical alone, batched, chunked and preempted; every state slot back at the end',
  async () => {
    const all = prompts.map((_, i) => i);
    const alone: string[] = [];
    for (const i of all) alone.push(...(await run({ enablePrefixCaching: false }, [i])).t);
    const paths: Record<string, Partial<EngineOptions>> = {
      'batch of 9': {},
      'chunk 5': { maxNumBatchedTokens: 5 },
      'chunk 7, 3 seqs': { maxNumBatchedTokens: 7, maxNumSeqs: 3 },
      // 8 pages of 16 tokens after 4 slots and 4 for saved states: the running set cannot all fit, so requests are
      // preempted and recomputed (from a saved state where one was left)
      'tiny pool (preemption)': { maxNumSeqs: 4, kvCacheBytes: 8 * SLOT_BYTES + 8 * PAGE_BYTES, maxModelLen: 128 },
      'tiny pool, no prefix cache': { maxNumSeqs: 4, kvCacheBytes: 4 * SLOT_BYTES + 8 * PAGE_BYTES, maxModelLen: 128,
        enablePrefixCaching: false },
    };
    const stats = new Map<string, EngineStats>();
    for (const [name, opts] of Object.entries(paths)) {
      const r = await run(opts, all);
      stats.set(name, r.stats);
      assert.deepEqual(r.t, alone, `path "${name}" changed a transcript`);
      assert.equal(r.stats.numFreeStateSlots, r.stats.numTotalStateSlots, `path "${name}" leaked a state slot`);
    }
    assert.ok(stats.get('tiny pool (preemption)')!.numPreemptions > 0, 'the tiny pool preempted nothing');
    assert.ok(stats.get('tiny pool, no prefix cache')!.numPreemptions > 0, 'the tiny pool preempted nothing');
    assert.ok(stats.get('chunk 5')!.prefixCacheHits > 0, 'chunks ending at page ends left no state to hit');
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

test('hybrid: states that would leave no KV page lower --max-num-seqs to what half the budget holds, and it serves',
  async () => {
    // 32 sequences' states (twice, with prefix caching) are more than the budget: half of it holds the running
    // sequences' states and a saved one for every 4 of them
    const budget = 40 * SLOT_BYTES + 16 * PAGE_BYTES;
    const core = await createEngineCore(engineOptions({ model: dir, backend: 'cpu', cpuThreads: 1, maxNumSeqs: 32,
      kvCacheBytes: budget, maxModelLen: 128 }));
    try {
      const running = Math.floor(budget / 2 / (1.25 * SLOT_BYTES));
      assert.ok(running > 15, `${running}: more than the 15 of a saved state each`);
      assert.deepEqual([core.info.maxNumSeqs, core.info.numStateSlots, core.info.numCachedStateSlots],
        [running, running, Math.ceil(running / 4)]);
      for (const [i, p] of prompts.slice(0, 4).entries()) {
        core.addRequest({ requestId: `r${i}`, promptTokenIds: p, arrivalTime: 0, priority: 0, cacheSalt: null,
          sampling: defaultSamplingParams({ temperature: 0, maxTokens: 3, ignoreEos: true }) });
      }
      let steps = 0;
      while (core.hasWork() && steps++ < 500) core.step();
      assert.equal(core.hasWork(), false, 'every request finished');
      assert.equal(core.stats().numFreeStateSlots, running);
    } finally {
      core.dispose();
    }
  });

test('hybrid prefix caching: a repeated prompt hits its pages and the state saved at its last page end, computes ' +
  'fewer prompt tokens and gives the same tokens; off, it hits nothing', async () => {
  const same = [0, 0, 3, 3];
  const on = await run({ maxNumSeqs: 1 }, same);
  const off = await run({ maxNumSeqs: 1, enablePrefixCaching: false }, same);
  assert.deepEqual(on.t, off.t);
  assert.equal(on.t[0], on.t[1]);
  const p0 = prompts[0]!.length;
  const p3 = prompts[3]!.length;
  const hits = 16 * Math.floor((p0 - 1) / 16) + 16 * Math.floor((p3 - 1) / 16);
  assert.equal(on.stats.prefixCacheHits, hits, 'each repeat hits its last page end before its last token');
  assert.equal(on.stats.numPromptTokens, off.stats.numPromptTokens - hits);
  assert.deepEqual([off.stats.prefixCacheHits, off.stats.numCachedStateSlots, on.stats.numCachedStateSlots], [0, 0, 1]);
  assert.ok(on.stats.numCachedStates > 0);
});

test('hybrid prefix caching on bf16 states (--mamba-ssm-cache-dtype bfloat16): a hit gives the tokens of the miss that '
  + 'saved its state', async () => {
  // bf16 states are rounded at every step's end, so chunking moves the roundings (as in vLLM): the promise is a hit
  // against its own miss, which ended a step where it saved the state
  const same = [0, 0, 3, 3];
  const on = await run({ maxNumSeqs: 1, mambaSsmCacheDtype: 'bf16' }, same);
  assert.equal(on.t[0], on.t[1]);
  assert.equal(on.t[2], on.t[3]);
  assert.ok(on.stats.prefixCacheHits > 0);
});

test('hybrid prefix caching: shared prefixes of several pages, follow-ups, chunked prefill across page ends and ' +
  'preemption give the transcripts of a cache miss, with hits taken', async () => {
  const all = sharedPages.map((_, i) => i);
  const miss: string[] = [];
  for (const i of all) miss.push(...(await run({ enablePrefixCaching: false }, [i], sharedPages)).t);
  const paths: Record<string, Partial<EngineOptions>> = {
    'one at a time': { maxNumSeqs: 1, cachedStateSlots: 8 },
    'chunk 5, 2 seqs': { maxNumBatchedTokens: 5, maxNumSeqs: 2 },
    'chunk 20, 3 seqs': { maxNumBatchedTokens: 20, maxNumSeqs: 3 },
    'tiny pool (preemption)': { maxNumSeqs: 3, kvCacheBytes: 6 * SLOT_BYTES + 9 * PAGE_BYTES, maxModelLen: 160 },
    'two saved states (eviction, hits cut back)': { maxNumSeqs: 1, maxNumBatchedTokens: 16, cachedStateSlots: 2 },
  };
  for (const [name, opts] of Object.entries(paths)) {
    const r = await run(opts, all, sharedPages);
    assert.deepEqual(r.t, miss, `path "${name}" changed a transcript`);
    assert.ok(r.stats.prefixCacheHits > 0, `path "${name}" took no hit`);
    assert.equal(r.stats.numFreeStateSlots, r.stats.numTotalStateSlots, `path "${name}" leaked a state slot`);
    if (name.startsWith('tiny pool')) assert.ok(r.stats.numPreemptions > 0, 'the tiny pool preempted nothing');
  }
});

test('hybrid prefix caching: a prompt whose pages match a cached prompt\'s past its saved states saves its state where '
  + 'they stop matching, so the next prompt of that prefix hits all of it (system prompt, then user turns)',
  async () => {
  // a 72-token shared prefix (4 whole pages, then 8 tokens), three different tails: the first prompt saves its state
  // at its own last page end (80) only; the second matches 4 pages with no state there, so its chunk ends at 64
  const shared = Array.from({ length: 72 }, (_, i) => (i * 37 + 11) % 400);
  const tails = [[5, 9, 1, 77, 3, 8, 2, 6, 4, 10], Array.from({ length: 21 }, (_, i) => (i * 53 + 2) % 400),
    [300, 12, 7]];
  const set = tails.map((t) => [...shared, ...t]);
  const miss = await run({ enablePrefixCaching: false }, [0, 1, 2], set);
  const on = await run({ maxNumSeqs: 1, cachedStateSlots: 8 }, [0, 1, 2], set);
  assert.deepEqual(on.t, miss.t, 'the transcripts of a miss');
  assert.equal(on.stats.prefixCacheHits, 64, 'the third prompt hits the 4 shared pages; the first two hit nothing');
  assert.equal(on.stats.numPromptTokens, miss.stats.numPromptTokens - 64);
});
