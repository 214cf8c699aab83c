// A mixture of experts on the engine's scheduling paths (CPU, f32): a greedy transcript depends only on the model
// and the prompt, never on which other tokens share a step (and so its experts), chunking, prefix-cache hits or
// preemption.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { LLM } from '../../src/engine/llm.js';
import type { EngineOptions } from '../../src/engine/options.js';
import type { EngineStats } from '../../src/engine/types.js';
import { makeTestModel } from '../../src/tools/make-test-model.js';
import { sharedPrefixPrompts } from './helpers.js';

let dir = '';
const prompts: number[][] = [];
const MAX_TOKENS = 12;

before(async () => {
  dir = mkdtempSync(join(tmpdir(), 'quire-moe-inv-'));
  await makeTestModel({ shape: 'tiny-qwen3-moe', outDir: dir, dtype: 'f32', seed: 3 });
  prompts.push(...sharedPrefixPrompts(12345, 17, 90, 3));
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

test('MoE: greedy transcripts identical alone, batched, chunked, from the prefix cache and preempted', async () => {
  const all = prompts.map((_, i) => i);
  const alone: string[] = [];
  for (const i of all) alone.push(...(await run({}, [i])).t);
  const paths: Record<string, Partial<EngineOptions>> = {
    'batch of 17': {},
    'chunk 5': { maxNumBatchedTokens: 5 },
    'maxNumSeqs 1 (prefix cache)': { maxNumSeqs: 1 },
    // 12 pages of 16 tokens: the running set cannot all fit, so requests are preempted and recomputed
    'tiny pool (preemption)': { kvCacheBytes: 12 * 2 * 3 * 2 * 16 * 16 * 4, maxModelLen: 160 },
  };
  const stats = new Map<string, EngineStats>();
  for (const [name, opts] of Object.entries(paths)) {
    const r = await run(opts, all);
    stats.set(name, r.stats);
    assert.deepEqual(r.t, alone, `path "${name}" changed a transcript`);
  }
  assert.ok(stats.get('tiny pool (preemption)')!.numPreemptions > 0, 'the tiny pool preempted nothing');
  assert.ok(stats.get('maxNumSeqs 1 (prefix cache)')!.prefixCacheHits > 0, 'the shared prefix never hit the cache');
});
