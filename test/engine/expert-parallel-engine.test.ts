// Expert parallelism (vLLM's --enable-expert-parallel) in a tensor-parallel engine on the CPU backend: each rank
// holds whole experts and runs only its own experts' share of the routed tokens, the router replicated and the
// ranks' partial outputs summed by the all-reduce after the layer. Its greedy tokens are one engine's for Qwen3-MoE
// (per-expert tensors), Mixtral (w1/w2/w3, one expert a rank at -tp 4) and Qwen3.5-MoE (fused expert tensors, and a
// shared expert that stays split on its width), in both placements; fewer experts than ranks is refused naming the
// field; a dense model ignores the flag, as vLLM does.

import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { LLM } from '../../src/engine/llm.js';
import type { EngineOptions } from '../../src/engine/options.js';
import { makeTestModel } from '../../src/tools/make-test-model.js';

const root = mkdtempSync(join(tmpdir(), 'quire-ep-'));
const SHAPES = { 'qwen3-moe': 'tiny-qwen3-moe', mixtral: 'tiny-mixtral', 'qwen3.5-moe': 'tiny-qwen3.5-moe', qwen3: 'tiny-qwen3' } as const;
before(async () => {
  for (const [dir, shape] of Object.entries(SHAPES)) await makeTestModel({ shape, outDir: join(root, dir), dtype: 'f32', seed: 13 });
});
after(() => rmSync(root, { recursive: true, force: true }));

const prompts = ['The quick brown fox', 'Once upon a time in a land far away, there lived', 'The quick brown fox jumps'];

async function greedy(model: keyof typeof SHAPES, o: Partial<EngineOptions> = {}): Promise<number[][]> {
  const llm = new LLM(join(root, model), { backend: 'cpu', cpuThreads: 1, maxModelLen: 256, enablePrefixCaching: true,
    maxNumBatchedTokens: 8, ...o });
  try {
    const out = await llm.generate(prompts, { maxTokens: 12, temperature: 0, ignoreEos: true });
    return out.map((c) => c.tokenIds);
  } finally {
    await llm.close();
  }
}

const ep = (tensorParallelSize: number, expertPlacementStrategy: EngineOptions['expertPlacementStrategy'] = 'linear') =>
  ({ tensorParallelSize, enableExpertParallel: true, expertPlacementStrategy });

test('Qwen3-MoE: -tp 2 (linear) and -tp 4 (round_robin) with --enable-expert-parallel give one engine\'s greedy tokens', async () => {
  const one = await greedy('qwen3-moe');
  assert.deepEqual(await greedy('qwen3-moe', ep(2)), one);
  assert.deepEqual(await greedy('qwen3-moe', ep(4, 'round_robin')), one);
});

test('Mixtral (4 experts): -tp 4 (one expert a rank) with --enable-expert-parallel give one engine\'s greedy tokens', async () => {
  const one = await greedy('mixtral');
  assert.deepEqual(await greedy('mixtral', ep(4)), one);
});

test('Qwen3.5-MoE (fused experts, a shared expert): -tp 2 with and without --enable-expert-parallel give one engine\'s greedy tokens', async () => {
  const one = await greedy('qwen3.5-moe');
  assert.deepEqual(await greedy('qwen3.5-moe', ep(2, 'round_robin')), one);
  // without the flag its fused expert tensors split on their width
  assert.deepEqual(await greedy('qwen3.5-moe', { tensorParallelSize: 2 }), one);
});

test('fewer experts than ranks is refused naming the field; a dense model ignores the flag (as vLLM)', async () => {
  // tiny-mixtral read as 2 experts: -tp 4 splits its heads (4) and widths, but 2 experts cannot cover 4 ranks
  await assert.rejects(() => greedy('mixtral', { ...ep(4), hfOverrides: { num_local_experts: 2 } }),
    /--tensor-parallel-size 4: num_local_experts \(2\) is fewer than the expert-parallel size \(4\)/);
  assert.deepEqual(await greedy('qwen3', ep(2)), await greedy('qwen3'));
});
