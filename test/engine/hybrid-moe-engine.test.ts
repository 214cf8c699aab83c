// The hybrid mixtures of experts (tiny Qwen3.5-MoE and Qwen3-Next, written by make-test-model as their checkpoints are
// laid out, f32) end to end on the CPU engine: a prompt runs from the model directory, and a greedy transcript depends
// only on the model and the prompt, never on batching, chunking or prefix-cache hits; every state slot comes back.
// On CUDA, which has no shared-expert op yet, such a model is refused before it loads.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { backendRefusal } from '../../src/engine/backend-factory.js';
import { LLM } from '../../src/engine/llm.js';
import type { EngineOptions } from '../../src/engine/options.js';
import { loadModelConfig, parseModelConfig } from '../../src/loader/config.js';
import { makeTestModel } from '../../src/tools/make-test-model.js';
import { testModelShapes } from '../../src/tools/test-model/shapes.js';
import { sharedPrefixPrompts } from './helpers.js';

const SHAPES = ['tiny-qwen3.5-moe', 'tiny-qwen3-next'];
let root = '';
const prompts = sharedPrefixPrompts(777, 5, 30, 2);

before(async () => {
  root = mkdtempSync(join(tmpdir(), 'quire-hybrid-moe-'));
  for (const shape of SHAPES) await makeTestModel({ shape, outDir: join(root, shape), dtype: 'f32', seed: 2 });
});
after(() => rmSync(root, { recursive: true, force: true }));

async function run(shape: string, opts: Partial<EngineOptions>, which: number[]): Promise<{ t: string[]; hits: number }> {
  const llm = new LLM(join(root, shape), { backend: 'cpu', cpuThreads: 1, ...opts });
  try {
    const out = await llm.generate(which.map((i) => prompts[i]!), { maxTokens: 8, temperature: 0, ignoreEos: true });
    const stats = await llm.stats();
    assert.equal(stats.numFreeStateSlots, stats.numTotalStateSlots, 'a state slot leaked');
    return { t: out.map((c) => c.tokenIds.join(',')), hits: stats.prefixCacheHits };
  } finally {
    await llm.close();
  }
}

for (const shape of SHAPES) {
  test(`${shape}: greedy transcripts from the model directory, identical alone, batched, chunked and from the prefix cache`, async () => {
    const all = prompts.map((_, i) => i);
    const alone: string[] = [];
    for (const i of all) alone.push(...(await run(shape, { enablePrefixCaching: false }, [i])).t);
    assert.ok(alone.every((t) => t.split(',').length === 8));
    assert.ok(new Set(alone).size > 1, 'every prompt gave the same transcript');
    for (const opts of [{}, { maxNumBatchedTokens: 7, maxNumSeqs: 2 }, { maxNumBatchedTokens: 16, maxNumSeqs: 1, cachedStateSlots: 8 }]) {
      const r = await run(shape, opts, all);
      assert.deepEqual(r.t, alone, JSON.stringify(opts));
      // one at a time, the prompts after the first that share its 40-token prefix hit its pages and saved states
      if (opts.maxNumSeqs === 1) assert.ok(r.hits > 0, 'no prefix-cache hit');
    }
  });
}

test('a model with shared experts is not refused on CUDA (its gated shared expert runs there since session 30)', () => {
  const c = loadModelConfig(join(root, 'tiny-qwen3-next', 'config.json'));
  for (const shape of ['tiny-qwen3-next-128', 'tiny-qwen3.5-moe-128']) {
    assert.equal(backendRefusal(parseModelConfig(testModelShapes()[shape], shape), 'cuda'), null, shape);
  }
  // tiny-qwen3-next's DeltaNet key heads of 16 are what CUDA refuses, not its shared expert
  assert.match(backendRefusal(c, 'cuda') ?? '', /linear_key_head_dim/);
});
