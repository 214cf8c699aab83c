// Async scheduling (EngineOptions.asyncScheduling, on by default) schedules and launches a step before the
// previous step's tokens reach the host: its rows feed them from the backend (negative input ids) and a request
// that the previous step ends is computed once more and dropped. The transcripts must be those of completing
// each step before scheduling the next, for every kind of request at once: greedy and seeded sampling, stop
// tokens that end a request while its next step is already launched, max_tokens, rows that need the host's
// sampler (logprobs, min_tokens) in the same batch, chunked prompts, prefix-cache hits and preemption.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { LLM } from '../../src/engine/llm.js';
import { createEngineCore } from '../../src/engine/create-engine.js';
import { engineOptions } from '../../src/engine/options.js';
import type { Model } from '../../src/model/model.js';
import { defaultSamplingParams } from '../../src/sampling/params.js';
import type { EngineOptions } from '../../src/engine/options.js';
import type { EngineStats } from '../../src/engine/types.js';
import type { RawSamplingParams } from '../../src/sampling/validate.js';
import { makeTestModel } from '../../src/tools/make-test-model.js';
import { sharedPrefixPrompts } from './helpers.js';

let dir = '';
const prompts: number[][] = [];
let stopIds: number[] = [];

before(async () => {
  dir = mkdtempSync(join(tmpdir(), 'quire-async-'));
  await makeTestModel({ shape: 'tiny-llama', outDir: dir, dtype: 'f32', seed: 0 });
  prompts.push(...sharedPrefixPrompts(777, 16, 60, 4));
  // stop tokens taken from each request's own greedy transcript, a few tokens in
  const llm = new LLM(dir, { backend: 'cpu', cpuThreads: 1, asyncScheduling: false });
  const out = await llm.generate(prompts, { maxTokens: 12, temperature: 0, ignoreEos: true });
  await llm.close();
  stopIds = out.map((c, i) => c.tokenIds[2 + (i % 7)]!);
});

after(() => rmSync(dir, { recursive: true, force: true }));

function paramsOf(i: number): RawSamplingParams {
  switch (i % 4) {
    case 0: return { maxTokens: 3 + i, temperature: 0, ignoreEos: true };
    case 1: return { maxTokens: 14, temperature: 0.9, topP: 0.9, seed: 100 + i, ignoreEos: true };
    case 2: return { maxTokens: 14, temperature: 0, stopTokenIds: [stopIds[i]!], ...(i === 6 ? { minTokens: 6 } : {}) };
    default: return { maxTokens: 10, temperature: 0, ignoreEos: true, ...(i === 3 ? { logprobs: 2 } : {}) };
  }
}

async function run(opts: Partial<EngineOptions>): Promise<{ out: string[]; stats: EngineStats }> {
  const llm = new LLM(dir, { backend: 'cpu', cpuThreads: 1, ...opts });
  try {
    const done = await Promise.all(prompts.map((p, i) => llm.generate([p], paramsOf(i))));
    const out = done.map(([c]) => `${c!.finishReason}: ${c!.tokenIds.join(',')}`);
    return { out, stats: await llm.stats() };
  } finally {
    await llm.close();
  }
}

const PATHS: Record<string, Partial<EngineOptions>> = {
  'one batch': {},
  'chunks of 16 tokens': { maxNumBatchedTokens: 16 },
  // decode rows sit out while prompts wait: a row skipped for a step feeds its token the step after
  'prefill-first, chunks of 8 tokens, 3 at once': { stepPolicy: 'prefill-first', maxNumBatchedTokens: 8, maxNumSeqs: 3 },
  // 12 pages of 16 tokens: requests are preempted and recomputed
  'tiny pool (preemption)': { kvCacheBytes: 12 * 2 * 16 * 2 * 2 * 16 * 4, maxModelLen: 160, maxNumBatchedTokens: 32 },
};

for (const [name, opts] of Object.entries(PATHS)) {
  test(`${name}: the transcripts of step-by-step scheduling`, async () => {
    const sync = await run({ ...opts, asyncScheduling: false });
    const ahead = await run(opts);
    assert.deepEqual(ahead.out, sync.out);
    assert.equal(sync.stats.numStepsScheduledAhead, 0);
    assert.ok(ahead.stats.numStepsScheduledAhead > 0, 'no step was scheduled ahead');
    assert.ok(sync.out.filter((o) => o.startsWith('stop')).length >= 3, `too few stops: ${sync.out.join(' | ')}`);
    if (name.includes('preemption')) assert.ok(ahead.stats.numPreemptions > 0, 'nothing was preempted');
  });
}

test('eager device-sampled steps: the next step launches before the previous step is waited for', async () => {
  const transcripts: string[][] = [];
  for (const asyncScheduling of [false, true]) {
    const core = await createEngineCore(engineOptions({ model: dir, backend: 'cpu', cpuThreads: 1, asyncScheduling,
      maxNumBatchedTokens: 16 }));
    const backend = (core as unknown as { model: Model }).model.backend;
    const log: string[] = [];
    let steps = 0;
    const beginStep = backend.beginStep.bind(backend);
    backend.beginStep = (batch) => { log.push(`begin ${++steps}`); return beginStep(batch); };
    // a device that has not finished: the ids are read when waited for
    backend.sampleTokensAsync = (logits, step) => {
      const n = steps;
      const ids = backend.sampleTokens(logits, step);
      return () => { log.push(`wait ${n}`); return ids; };
    };
    const out = new Map<string, number[]>();
    prompts.slice(0, 4).forEach((p, i) => core.addRequest({ requestId: `r${i}`, promptTokenIds: p, priority: 0,
      sampling: defaultSamplingParams({ maxTokens: 5, temperature: 0, ignoreEos: true }), cacheSalt: null,
      arrivalTime: Date.now() }));
    while (core.hasWork()) {
      for (const o of core.advance()) out.set(o.requestId, [...(out.get(o.requestId) ?? []), ...o.newTokenIds]);
    }
    core.dispose();
    transcripts.push([...out.entries()].sort().map(([id, t]) => `${id}: ${t.join(',')}`));
    const waited = log.filter((l) => l.startsWith('wait')).length;
    assert.equal(waited, steps, `every step waited for once: ${log.join(' ')}`);
    const overlapped = log.some((l, i) => l.startsWith('wait') && Number(l.split(' ')[1]) < Number(log[i - 1]?.split(' ')[1]));
    assert.equal(overlapped, asyncScheduling, log.join(' '));
  }
  assert.deepEqual(transcripts[1], transcripts[0]);
});
