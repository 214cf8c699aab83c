// What an expert-parallel rank reads (parallel/sharded-source.ts with ShardOptions.expertParallel): its own experts'
// tensors whole and no other expert's (per-expert checkpoints: Qwen3-MoE, Mixtral, Qwen3-Next), only its experts'
// bytes of a fused expert tensor (Qwen3.5-MoE's experts.gate_up_proj / down_proj), the router whole, and a shared
// expert still split on its width; together the ranks read every expert once.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { CpuBackend } from '../../src/backend/cpu/cpu-backend.js';
import { parseModelConfig } from '../../src/loader/config.js';
import { BYTES_PER_ELEMENT } from '../../src/loader/dtype.js';
import type { WeightSource } from '../../src/loader/types.js';
import { Model } from '../../src/model/model.js';
import { randomWeightSource } from '../../src/model/random-weights.js';
import { rankView } from '../../src/parallel/pipeline.js';
import { expertParallel, type ExpertPlacement } from '../../src/parallel/sharding.js';
import { testModelShapes } from '../../src/tools/test-model/shapes.js';

interface Reads {
  /** Names read whole (read). */
  whole: Set<string>;
  /** Byte ranges read of each tensor (readInto). */
  ranges: Map<string, [number, number][]>;
}

/** `source` with readInto (as a safetensors directory has it), recording what is read. */
function recording(source: WeightSource): { source: WeightSource; reads: Reads } {
  const reads: Reads = { whole: new Set(), ranges: new Map() };
  return {
    reads,
    source: {
      ...source,
      read: (n) => { reads.whole.add(n); return source.read(n); },
      readInto: (n, offset, dest) => {
        if (!reads.ranges.has(n)) reads.ranges.set(n, []);
        reads.ranges.get(n)!.push([offset, offset + dest.length]);
        dest.set(source.read(n).data.subarray(offset, offset + dest.length));
      },
    },
  };
}

const EXPERT = /layers\.\d+\.(?:mlp|block_sparse_moe)\.experts\.(\d+)\./;

for (const [shape, tp, placement] of [['tiny-qwen3-moe', 2, 'linear'], ['tiny-qwen3-moe', 4, 'round_robin'],
  ['tiny-mixtral', 2, 'round_robin'], ['tiny-qwen3-next', 2, 'linear'], ['tiny-qwen3.5-moe', 2, 'linear'],
  ['tiny-qwen3.5-moe', 2, 'round_robin']] as const) {
  test(`${shape}, -tp ${tp}, experts whole (${placement}): a rank reads its own experts alone, the router whole`, () => {
    const config = { ...parseModelConfig(testModelShapes()[shape], shape), dtype: 'f32' as const };
    const E = config.moe!.numExperts;
    const full = randomWeightSource(config, { seed: 3 });
    const seen = new Map<number, number>();
    for (let rank = 0; rank < tp; rank++) {
      const mine = expertParallel(E, rank, tp, placement as ExpertPlacement).experts;
      const { source, reads } = recording(full);
      const view = rankView(config, source, { tpRank: rank, stage: 0 }, tp, 1, null, { expertParallel: placement });
      assert.deepEqual(view.config.moe!.localExperts, expertParallel(E, rank, tp, placement).local);
      assert.equal(view.config.moe!.expertIntermediateSize, config.moe!.expertIntermediateSize, 'experts keep their width');
      const backend = new CpuBackend({ kvCacheBytes: 1 << 20, numThreads: 1 });
      Model.load(view.config, view.weights, backend);
      backend.dispose();
      const all = [...reads.whole, ...reads.ranges.keys()];
      const experts = new Set(all.map((n) => EXPERT.exec(n)?.[1]).filter((e) => e !== undefined).map(Number));
      const fused = all.filter((n) => /mlp\.experts\.(gate_up|down)_proj$/.test(n));
      if (fused.length === 0) {
        // one module an expert: this rank's experts, whole (read, not by ranges)
        assert.deepEqual([...experts].sort((a, b) => a - b), [...mine].sort((a, b) => a - b), `rank ${rank}'s experts`);
        for (const n of all.filter((x) => EXPERT.test(x))) assert.ok(reads.whole.has(n) && !reads.ranges.has(n), `${n} read whole`);
      } else {
        // fused [E, rows, cols]: the rank's experts' rows, each read once; where small slabs are near (these tiny
        // ones: sharded-source.ts readRanges), a read spans from one of its experts to another, never beyond
        for (const n of fused) {
          const info = full.info(n);
          const per = info.shape[1]! * info.shape[2]! * BYTES_PER_ELEMENT[info.dtype];
          const spans = reads.ranges.get(n)!;
          for (const [a, b] of spans) {
            assert.ok(a % per === 0 && b % per === 0 && mine.includes(a / per) && mine.includes(b / per - 1),
              `${n}: read [${a}, ${b}) from and to rank ${rank}'s experts`);
          }
          const got = spans.flatMap(([a, b]) => Array.from({ length: (b - a) / per }, (_, i) => a / per + i));
          assert.deepEqual(got.filter((e) => mine.includes(e)), mine, `${n}: rank ${rank}'s experts, each once`);
          assert.ok(!reads.whole.has(n));
          assert.deepEqual(view.weights.info(n).shape, [mine.length, info.shape[1], info.shape[2]]);
        }
      }
      for (const e of mine) seen.set(e, (seen.get(e) ?? 0) + 1);
      // the router whole on every rank; a shared expert split on its width
      const router = all.find((n) => /\.(?:mlp|block_sparse_moe)\.gate\.weight$/.test(n))!;
      assert.deepEqual(view.weights.info(router).shape, full.info(router).shape, 'router replicated');
      const shared = all.find((n) => n.endsWith('mlp.shared_expert.gate_proj.weight'));
      if (shared) assert.equal(view.weights.info(shared).shape[0], full.info(shared).shape[0]! / tp, 'shared expert split');
    }
    assert.deepEqual([...seen.keys()].sort((a, b) => a - b), Array.from({ length: E }, (_, e) => e));
    assert.ok([...seen.values()].every((n) => n === 1), 'every expert on one rank');
  });
}
