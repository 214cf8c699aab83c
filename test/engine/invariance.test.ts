// Per-path bit exactness on the CPU path: a greedy transcript depends only on
// the model and the prompt, never on what else runs, chunk size, prefix-cache
// hits, the sequence cap or preemption.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { LLM } from '../../src/engine/llm.js';
import type { EngineOptions } from '../../src/engine/options.js';
import type { EngineStats } from '../../src/engine/types.js';
import { makeTestModel } from '../../src/tools/make-test-model.js';
import { sharedPrefixPrompts } from './helpers.js';

// Recorded from the CPU backend (f32) on tiny-llama, seed 0: the gate for this path.
const CPU_F32_MD5 = 'f0567808f552766dda2334f3c634572f';

let dir = '';
const prompts: number[][] = [];
const MAX_TOKENS = 12;

before(async () => {
  dir = mkdtempSync(join(tmpdir(), 'quire-inv-'));
  await makeTestModel({ shape: 'tiny-llama', outDir: dir, dtype: 'f32', seed: 0 });
  prompts.push(...sharedPrefixPrompts(12345, 17, 90, 3));
});

after(() => rmSync(dir, { recursive: true, force: true }));

const statsOf = new Map<string, EngineStats>();

async function transcripts(opts: Partial<EngineOptions>, which: number[], name = ''): Promise<string[]> {
  const llm = new LLM(dir, { backend: 'cpu', cpuThreads: 1, ...opts });
  try {
    const out = await llm.generate(which.map((i) => prompts[i]!), { maxTokens: MAX_TOKENS, temperature: 0, ignoreEos: true });
    statsOf.set(name, await llm.stats());
    return out.map((c) => c.tokenIds.join(','));
  } finally {
    await llm.close();
  }
}

const md5 = (s: string[]) => createHash('md5').update(s.join('\n')).digest('hex');
const all = () => prompts.map((_, i) => i);

test('greedy transcripts are identical on every scheduling path', async (t) => {
  const alone: string[] = [];
  for (const i of all()) alone.push(...(await transcripts({}, [i])));
  const paths: Record<string, Partial<EngineOptions>> = {
    'batch of 17': {},
    'chunk 1': { maxNumBatchedTokens: 1 },
    'chunk 7': { maxNumBatchedTokens: 7 },
    'chunk 64': { maxNumBatchedTokens: 64 },
    'chunk 16, prefix cache off': { maxNumBatchedTokens: 16, enablePrefixCaching: false },
    'chunk 4096': { maxNumBatchedTokens: 4096 },
    'maxNumSeqs 1': { maxNumSeqs: 1 },
    'maxNumSeqs 64': { maxNumSeqs: 64 },
    'each step completed before the next is scheduled': { asyncScheduling: false },
    // 12 pages of 16 tokens: the running set cannot all fit, so requests are preempted and recomputed
    'tiny pool (preemption)': { kvCacheBytes: 12 * 2 * 16 * 2 * 2 * 16 * 4, maxModelLen: 160 },
  };
  const reference = md5(alone);
  t.diagnostic(`cpu-f32 tiny-llama transcript md5 ${reference}`);
  for (const [name, opts] of Object.entries(paths)) {
    const got = await transcripts(opts, all(), name);
    assert.deepEqual(got, alone, `path "${name}" changed a transcript`);
  }
  assert.equal(reference, CPU_F32_MD5, 'the recorded cpu-f32 transcript changed');
  // the paths really took the branches they are named after
  assert.ok(statsOf.get('tiny pool (preemption)')!.numPreemptions > 0, 'the tiny pool preempted nothing');
  assert.ok(statsOf.get('maxNumSeqs 1')!.prefixCacheHits > 0, 'the shared prefix never hit the cache');
  assert.equal(statsOf.get('chunk 16, prefix cache off')!.prefixCacheHits, 0);
  assert.ok(statsOf.get('chunk 1')!.numSteps > 17 * MAX_TOKENS, 'chunk 1 did not chunk');
});
