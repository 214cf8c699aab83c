// A whole test model split over tensor-parallel ranks (threads on the CPU backend, parallel/sharded-source.ts and
// tp-rank.ts, the layers' all-reduces): every rank's logits are the unsplit model's, within f32 summation order.
// Covered: q heads split, KV heads split and replicated (tp above num_key_value_heads), o and down row-parallel,
// qkv biases (Qwen2), Phi-3's fused qkv_proj and gate_up_proj, a mixture of experts' experts split on their width
// (Qwen3.5-MoE's fused expert tensors too) or held whole a rank (expert parallel, both placements),
// hybrid models' gated DeltaNet layers and gated attention (Qwen3.5; Qwen3-Next's grouped projections, its shared
// expert), embed_tokens and lm_head split by vocabulary rows (the embedding summed, the logits gathered).

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { CpuBackend } from '../../src/backend/cpu/cpu-backend.js';
import { parseModelConfig } from '../../src/loader/config.js';
import { Model } from '../../src/model/model.js';
import { randomWeightSource } from '../../src/model/random-weights.js';
import { createCpuCommGroup } from '../../src/parallel/cpu-comm.js';
import type { ExpertPlacement } from '../../src/parallel/sharding.js';
import { testModelShapes } from '../../src/tools/test-model/shapes.js';
import { prepare, twoPrompts } from './tp-model-batch.js';
import { runRanks } from './ranks.js';

type RankOut = { logits: Float32Array; numHeads: number; numKvHeads: number; kvBytesPerToken: number; lmHeadRows: number };

function unsplit(shape: string): Float32Array {
  const config = { ...parseModelConfig(testModelShapes()[shape], shape), dtype: 'f32' as const };
  const backend = new CpuBackend({ kvCacheBytes: 1 << 22, numThreads: 1 });
  const model = Model.load(config, randomWeightSource(config, { seed: 5 }), backend);
  prepare(model, backend);
  const logits = model.forward(twoPrompts(config.hybrid !== null));
  backend.dispose();
  return logits;
}

const CASES: readonly (readonly [string, readonly number[], ExpertPlacement | null])[] = [['tiny-qwen3', [2, 4], null],
  ['tiny-qwen2', [2], null], ['tiny-phi3', [2], null], ['tiny-qwen3-moe', [2], null], ['tiny-qwen3.5', [2], null],
  ['tiny-qwen3-next', [2], null], ['tiny-qwen3.5-moe', [2], null],
  // expert parallel: whole experts a rank (per-expert and fused tensors; shared experts still split on their width)
  ['tiny-qwen3-moe', [2, 4], 'linear'], ['tiny-mixtral', [4], 'round_robin'], ['tiny-qwen3.5-moe', [2], 'linear'],
  ['tiny-qwen3-next', [2], 'round_robin']];

for (const [shape, sizes, expertParallel] of CASES) {
  for (const size of sizes) {
    const how = expertParallel ? `, experts whole (${expertParallel})` : '';
    test(`${shape} over ${size} tensor-parallel ranks${how}: every rank's logits are the unsplit model's`, async () => {
      const c = parseModelConfig(testModelShapes()[shape], shape);
      const expected = unsplit(shape);
      const group = createCpuCommGroup(size, { timeoutMs: 30_000 });
      const ranks = await runRanks<RankOut>(new URL('./tp-model-worker.js', import.meta.url), size,
        (rank) => ({ shape, rank, size, group, expertParallel }));
      const scale = Math.max(...expected.map(Math.abs));
      ranks.forEach((r, rank) => {
        assert.equal(r.numHeads, c.numHeads / size, `rank ${rank}'s heads`);
        assert.equal(r.numKvHeads, Math.max(1, c.numKvHeads / size), `rank ${rank}'s KV heads`);
        assert.equal(r.logits.length, expected.length);
        // embed_tokens and lm_head (tied or not) by vocabulary rows (the vocabulary padded to a multiple of 64)
        const rows = Math.ceil(c.vocabSize / 64) * 64 / size;
        assert.equal(r.lmHeadRows, rows, `rank ${rank}'s lm_head rows`);
        r.logits.forEach((v, i) => assert.ok(Math.abs(v - expected[i]!) <= 1e-5 * scale, `rank ${rank}, logit ${i}: ${v} against ${expected[i]}`));
      });
    });
  }
}
