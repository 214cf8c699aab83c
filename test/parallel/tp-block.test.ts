// Tensor parallelism end to end on the CPU: ranks as worker threads, each reading only its slices (sharding.ts) and
// meeting the others through the CPU communicator, compute a decoder block (vocab-parallel embedding, qkv with KV
// heads split or replicated, row-parallel o and down with all-reduces, experts split on their width or whole, a
// vocab-parallel lm_head all-gathered) equal to the same block unsharded, within f32 rounding.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createCpuCommGroup } from '../../src/parallel/cpu-comm.js';
import { randomArray } from '../backend/helpers.js';
import { runRanks } from './ranks.js';
import { addInto, gatedSingleKeyAttention, matmulT, siluMulRows } from './tp-math.js';
import type { BlockDims, BlockWeights, RankData, RankResult } from './tp-rank-worker.js';

const WORKER = new URL('./tp-rank-worker.js', import.meta.url);

function randomWeights(d: BlockDims, seed: number): BlockWeights {
  const r = (n: number, s: number): Float32Array => randomArray(n, seed * 100 + s, -0.5, 0.5);
  const qkvRows = (d.numHeads + 2 * d.numKvHeads) * d.headDim;
  return {
    embed: r(d.vocab * d.hidden, 1),
    qkv: r(qkvRows * d.hidden, 2),
    o: r(d.hidden * d.numHeads * d.headDim, 3),
    gateUp: r(2 * d.inter * d.hidden, 4),
    down: r(d.hidden * d.inter, 5),
    expertsGateUp: r(d.numExperts * 2 * d.expertInter * d.hidden, 6),
    expertsDown: r(d.numExperts * d.hidden * d.expertInter, 7),
    expertWeights: randomArray(d.numExperts, seed * 100 + 8, 0, 1),
    lmHead: r(d.vocab * d.hidden, 9),
  };
}

/** The same block on whole weights, in one thread. */
function unsharded(d: BlockDims, w: BlockWeights, ids: Int32Array): RankResult {
  const { T, hidden: H } = d;
  const h = new Float32Array(T * H);
  ids.forEach((id, t) => h.set(w.embed.subarray(id * H, (id + 1) * H), t * H));
  const qkv = matmulT(h, w.qkv, T, (d.numHeads + 2 * d.numKvHeads) * d.headDim, H);
  const attn = gatedSingleKeyAttention(qkv, T, d.numHeads, d.numKvHeads, d.headDim);
  addInto(h, matmulT(attn, w.o, T, H, d.numHeads * d.headDim));
  addInto(h, matmulT(siluMulRows(matmulT(h, w.gateUp, T, 2 * d.inter, H), T, d.inter), w.down, T, H, d.inter));
  const I = d.expertInter;
  const moe = new Float32Array(T * H);
  for (let e = 0; e < d.numExperts; e++) {
    const a = siluMulRows(matmulT(h, w.expertsGateUp.subarray(e * 2 * I * H, (e + 1) * 2 * I * H), T, 2 * I, H), T, I);
    const y = matmulT(a, w.expertsDown.subarray(e * H * I, (e + 1) * H * I), T, H, I);
    for (let i = 0; i < y.length; i++) moe[i] = moe[i]! + w.expertWeights[e]! * y[i]!;
  }
  addInto(h, moe);
  return { hidden: h, logits: matmulT(h, w.lmHead, T, d.vocab, H) };
}

function assertClose(actual: Float32Array, expected: Float32Array, what: string): void {
  assert.equal(actual.length, expected.length, `${what}: length`);
  const scale = expected.reduce((m, v) => Math.max(m, Math.abs(v)), 0);
  for (let i = 0; i < expected.length; i++) {
    const diff = Math.abs(actual[i]! - expected[i]!);
    assert.ok(diff <= 1e-5 * scale + 1e-6, `${what}[${i}]: ${actual[i]} vs ${expected[i]} (scale ${scale})`);
  }
}

// 8 q heads on 2 KV heads: at 2 ranks the KV heads split, at 4 and 8 each is replicated on 2 and 4 ranks. Vocab 130
// pads to 192: at 8 ranks of 24 rows the last two hold padding only. 6 experts over 4 and 8 ranks: uneven, some none.
const DIMS: BlockDims = { T: 3, hidden: 16, numHeads: 8, numKvHeads: 2, headDim: 4, inter: 24, vocab: 130, numExperts: 6,
  expertInter: 8 };

for (const tp of [1, 2, 4, 8]) {
  for (const experts of ['tp', 'ep'] as const) {
    test(`${tp} ranks, experts ${experts === 'tp' ? 'split on their width' : 'whole a rank'}: the sharded block equals the unsharded`, async () => {
      const weights = randomWeights(DIMS, tp);
      const ids = Int32Array.from([5, 129, 64]);
      const expected = unsharded(DIMS, weights, ids);
      const group = createCpuCommGroup(tp, { timeoutMs: 30_000 });
      const out = await runRanks<RankResult>(WORKER, tp, (rank): RankData => ({ group, rank, dims: DIMS, weights, ids, experts }));
      assertClose(out[0]!.hidden, expected.hidden, 'hidden');
      assertClose(out[0]!.logits, expected.logits, 'logits');
      // replicated activations stay bit-identical across ranks (every rank sums in the same order)
      for (const o of out) {
        assert.deepEqual(o.hidden, out[0]!.hidden);
        assert.deepEqual(o.logits, out[0]!.logits);
      }
    });
  }
}
