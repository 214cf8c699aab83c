// Each rank's slices, read with readShard, reassemble the full weight: every sharding kind, KV heads split and
// replicated, vocab padding, experts split on their width and whole.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  attentionOutParallel, byteRanges, columnParallel, expertParallel, expertParallelShard, expertsDownParallel,
  expertsGateUpParallel, kvHeadsOf, mergedColumnParallel, numShardElements, padVocab, qkvParallel, readShard,
  rowParallel, vocabParallel, type Shard,
} from '../../src/parallel/sharding.js';
import { toLocalSlots } from '../../src/backend/moe-route.js';
import { heldExperts, localExpertSlot } from '../../src/loader/moe-config.js';
import type { MoeConfig } from '../../src/loader/types.js';

/** 0, 1, 2, ...: every element its own index, so a misplaced read shows. */
const iota = (n: number): Float32Array => Float32Array.from({ length: n }, (_, i) => i);
const ranks = (tp: number): number[] => Array.from({ length: tp }, (_, r) => r);

/** Rows [r0, r1) of a row-major [*, cols] array. */
const rows = (a: Float32Array, r0: number, r1: number, cols: number): Float32Array => a.slice(r0 * cols, r1 * cols);
const concat = (parts: Float32Array[]): Float32Array => {
  const out = new Float32Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) { out.set(p, at); at += p.length; }
  return out;
};

function checkShape(s: Shard): void {
  assert.equal(numShardElements(s), s.shape.reduce((a, b) => a * b, 1), `shape ${s.shape} holds the shard's elements`);
}

test('column-parallel: the ranks\' output rows, in rank order, are the weight', () => {
  const full = iota(12 * 5);
  for (const tp of [1, 2, 3, 4, 6, 12]) {
    const parts = ranks(tp).map((r) => { const s = columnParallel(12, 5, r, tp); checkShape(s); return readShard(full, s); });
    assert.deepEqual(concat(parts), full, `tp ${tp}`);
    assert.deepEqual(columnParallel(12, 5, 0, tp).shape, [12 / tp, 5]);
  }
  assert.throws(() => columnParallel(12, 5, 0, 5), /output rows 12 is not divisible by the parallel size 5/);
  assert.throws(() => columnParallel(12, 5, 2, 2), /rank 2 is not in \[0, 2\)/);
});

test('row-parallel: each row is the ranks\' column slices side by side', () => {
  const [R, C] = [3, 8];
  const full = iota(R * C);
  for (const tp of [1, 2, 4, 8]) {
    const parts = ranks(tp).map((r) => { const s = rowParallel(R, C, r, tp); checkShape(s); return readShard(full, s); });
    const w = C / tp;
    const rebuilt = new Float32Array(R * C);
    parts.forEach((p, r) => { for (let i = 0; i < R; i++) rebuilt.set(p.subarray(i * w, (i + 1) * w), i * C + r * w); });
    assert.deepEqual(rebuilt, full, `tp ${tp}`);
  }
});

test('merged column-parallel (gate_up): | gate_r | up_r | per rank, from one fused weight or two tensors alike', () => {
  const [I, H] = [6, 4];
  const fused = iota(2 * I * H);
  const gate = rows(fused, 0, I, H);
  const up = rows(fused, I, 2 * I, H);
  for (const tp of [1, 2, 3, 6]) {
    const Ip = I / tp;
    const locals = ranks(tp).map((r) => readShard(fused, mergedColumnParallel([I, I], H, r, tp)));
    locals.forEach((local, r) => {
      assert.deepEqual(local, concat([readShard(gate, columnParallel(I, H, r, tp)), readShard(up, columnParallel(I, H, r, tp))]));
    });
    assert.deepEqual(concat(locals.map((l) => rows(l, 0, Ip, H))), gate, `gate, tp ${tp}`);
    assert.deepEqual(concat(locals.map((l) => rows(l, Ip, 2 * Ip, H))), up, `up, tp ${tp}`);
  }
});

test('KV heads split while there are enough, else replicated: rank r holds head floor(r * kv / tp)', () => {
  assert.deepEqual(kvHeadsOf(8, 3, 4), { start: 6, count: 2, replicas: 1 });
  for (const [kv, tp] of [[1, 4], [2, 4], [2, 8], [4, 8], [8, 16], [8, 64]] as const) {
    for (const r of ranks(tp)) {
      const got = kvHeadsOf(kv, r, tp);
      assert.deepEqual(got, { start: Math.floor(r * kv / tp), count: 1, replicas: tp / kv }, `kv ${kv}, tp ${tp}, rank ${r}`);
    }
  }
  assert.throws(() => kvHeadsOf(3, 0, 4), /num_key_value_heads 3 does not divide the parallel size 4/);
  assert.throws(() => kvHeadsOf(6, 0, 4), /num_key_value_heads 6 is not divisible by the parallel size 4/);
});

test('qkv: q heads split, k and v heads split or replicated; the fused slice is | q_r | k_r | v_r |', () => {
  const cases = [{ numHeads: 8, numKvHeads: 2, headDim: 3 }, { numHeads: 12, numKvHeads: 4, headDim: 2 },
    { numHeads: 4, numKvHeads: 4, headDim: 2 }, { numHeads: 16, numKvHeads: 1, headDim: 2 }];
  const H = 5;
  for (const h of cases) {
    const D = h.headDim;
    const q = iota(h.numHeads * D * H);
    const k = iota(h.numKvHeads * D * H).map((v) => 10_000 + v);
    const v = iota(h.numKvHeads * D * H).map((x) => 20_000 + x);
    const fused = concat([q, k, v]);
    for (const tp of [1, 2, 4, 8, 16].filter((t) => h.numHeads % t === 0 && (t <= h.numKvHeads ? h.numKvHeads % t === 0 : t % h.numKvHeads === 0))) {
      const kvSeen = new Map<number, number>();
      const qParts: Float32Array[] = [];
      for (const r of ranks(tp)) {
        const s = qkvParallel(h, H, r, tp);
        for (const x of [s.q, s.k, s.v, s.fused]) checkShape(x);
        const [lq, lk, lv] = [readShard(q, s.q), readShard(k, s.k), readShard(v, s.v)];
        assert.deepEqual(readShard(fused, s.fused), concat([lq, lk, lv]), `fused, ${JSON.stringify(h)} tp ${tp} rank ${r}`);
        qParts.push(lq);
        // the KV heads read are those the rank says it holds; v the same heads as k
        assert.deepEqual(lk, rows(k, s.kvHeadStart * D, (s.kvHeadStart + s.numLocalKvHeads) * D, H));
        assert.deepEqual(lv, rows(v, s.kvHeadStart * D, (s.kvHeadStart + s.numLocalKvHeads) * D, H));
        for (let j = 0; j < s.numLocalKvHeads; j++) kvSeen.set(s.kvHeadStart + j, (kvSeen.get(s.kvHeadStart + j) ?? 0) + 1);
        // each local q head's KV head is the one its global q head uses (GQA groups of numHeads / numKvHeads)
        for (let j = 0; j < s.numLocalHeads; j++) {
          const global = r * s.numLocalHeads + j;
          const local = s.kvHeadStart + Math.floor(j / (s.numLocalHeads / s.numLocalKvHeads));
          assert.equal(local, Math.floor(global / (h.numHeads / h.numKvHeads)), `q head ${global}, tp ${tp}`);
        }
        // biases: the same rows of a [rows, 1] tensor
        const qb = iota(h.numHeads * D);
        assert.deepEqual(readShard(qb, qkvParallel(h, 1, r, tp).q), qb.slice(r * s.numLocalHeads * D, (r + 1) * s.numLocalHeads * D));
      }
      assert.deepEqual(concat(qParts), q, `q reassembled, tp ${tp}`);
      const replicas = Math.max(1, tp / h.numKvHeads);
      assert.deepEqual([...kvSeen.keys()].sort((a, b) => a - b), ranks(h.numKvHeads), `every KV head held, tp ${tp}`);
      for (const n of kvSeen.values()) assert.equal(n, replicas, `each KV head on ${replicas} ranks, tp ${tp}`);
    }
  }
});

test('o_proj: row-parallel over the columns of the rank\'s own q heads', () => {
  const h = { numHeads: 8, numKvHeads: 2, headDim: 2 };
  const hidden = 3;
  const o = iota(hidden * 16);
  for (const tp of [2, 4, 8]) {
    for (const r of ranks(tp)) {
      const local = readShard(o, attentionOutParallel(h, hidden, r, tp));
      const { numLocalHeads } = qkvParallel(h, hidden, r, tp);
      const w = numLocalHeads * h.headDim;
      for (let i = 0; i < hidden; i++) assert.deepEqual(local.subarray(i * w, (i + 1) * w), o.subarray(i * 16 + r * w, i * 16 + (r + 1) * w));
    }
  }
});

test('vocab-parallel: padded to a multiple of 64, split evenly, zeros after the last real row', () => {
  assert.equal(padVocab(128256), 128256);
  assert.equal(padVocab(151665), 151680);
  const hidden = 3;
  for (const [vocab, tp] of [[200, 1], [200, 2], [200, 4], [200, 8], [130, 4], [64, 2], [1, 4]] as const) {
    const full = iota(vocab * hidden).map((x) => x + 1);
    const padded = padVocab(vocab);
    const parts = ranks(tp).map((r) => {
      const s = vocabParallel(vocab, hidden, r, tp);
      checkShape(s);
      assert.deepEqual(s.shape, [padded / tp, hidden]);
      assert.equal(s.paddedVocab, padded);
      assert.equal(s.vocabStart, Math.min(r * padded / tp, vocab));
      return readShard(full, s);
    });
    const gathered = concat(parts);
    assert.equal(gathered.length, padded * hidden);
    assert.deepEqual(gathered.subarray(0, vocab * hidden), full, `vocab ${vocab}, tp ${tp}`);
    assert.ok(gathered.subarray(vocab * hidden).every((x) => x === 0), 'padding rows are zero');
  }
  // 130 padded to 192 over 4 ranks of 48: the last rank holds padding only
  const last = vocabParallel(130, hidden, 3, 4);
  assert.deepEqual([last.vocabStart, last.vocabEnd, last.runs.length, last.numPadElements], [130, 130, 0, 48 * hidden]);
  assert.throws(() => vocabParallel(200, hidden, 0, 3), /vocab_size 200 padded to a multiple of 64: 256 is not divisible by the parallel size 3/);
});

test('experts, tensor-parallel: every expert split on its width; fused [E, 2I, H] and per-expert tensors agree', () => {
  const [E, I, H] = [3, 4, 2];
  const gateUp = iota(E * 2 * I * H);
  const down = iota(E * H * I).map((x) => 1000 + x);
  for (const tp of [1, 2, 4]) {
    const Ip = I / tp;
    const gus = ranks(tp).map((r) => { const s = expertsGateUpParallel(E, I, H, r, tp); checkShape(s); return readShard(gateUp, s); });
    const downs = ranks(tp).map((r) => { const s = expertsDownParallel(E, H, I, r, tp); checkShape(s); return readShard(down, s); });
    for (let e = 0; e < E; e++) {
      const gate = rows(gateUp, e * 2 * I, e * 2 * I + I, H);
      const up = rows(gateUp, e * 2 * I + I, (e + 1) * 2 * I, H);
      const de = down.slice(e * H * I, (e + 1) * H * I);
      ranks(tp).forEach((r) => {
        const local = gus[r]!.subarray(e * 2 * Ip * H, (e + 1) * 2 * Ip * H);
        assert.deepEqual(local, concat([readShard(gate, columnParallel(I, H, r, tp)), readShard(up, columnParallel(I, H, r, tp))]),
          `expert ${e} gate_up, tp ${tp} rank ${r}`);
        assert.deepEqual(downs[r]!.subarray(e * H * Ip, (e + 1) * H * Ip), readShard(de, rowParallel(H, I, r, tp)),
          `expert ${e} down, tp ${tp} rank ${r}`);
      });
    }
  }
});

test('experts, expert-parallel: whole experts, linear (the first E mod ep ranks one more) or round robin', () => {
  assert.deepEqual(ranks(4).map((r) => expertParallel(10, r, 4).experts), [[0, 1, 2], [3, 4, 5], [6, 7], [8, 9]]);
  assert.deepEqual(ranks(4).map((r) => expertParallel(10, r, 4, 'round_robin').experts), [[0, 4, 8], [1, 5, 9], [2, 6], [3, 7]]);
  assert.deepEqual([...expertParallel(10, 1, 4).globalToLocal], [-1, -1, -1, 0, 1, 2, -1, -1, -1, -1]);
  const [E, R, C] = [10, 2, 3];
  const stacked = iota(E * R * C);
  for (const placement of ['linear', 'round_robin'] as const) {
    const held = new Map<number, Float32Array>();
    for (const r of ranks(4)) {
      const a = expertParallel(E, r, 4, placement);
      const s = expertParallelShard(E, R, C, a);
      checkShape(s);
      const local = readShard(stacked, s);
      a.experts.forEach((e, j) => held.set(e, local.slice(j * R * C, (j + 1) * R * C)));
    }
    assert.equal(held.size, E);
    for (let e = 0; e < E; e++) assert.deepEqual(held.get(e), stacked.slice(e * R * C, (e + 1) * R * C), `${placement} expert ${e}`);
  }
  // linear placement reads one contiguous range a rank
  assert.equal(expertParallelShard(E, R, C, expertParallel(E, 0, 4)).runs.length, 1);
});

test('expert-parallel: the arithmetic form (what the config and the kernels carry) is the same map as the table', () => {
  assert.deepEqual(expertParallel(10, 1, 4).local, { first: 3, stride: 1, count: 3 });
  assert.deepEqual(expertParallel(10, 3, 4, 'round_robin').local, { first: 3, stride: 4, count: 2 });
  for (const placement of ['linear', 'round_robin'] as const) {
    for (const [E, ep] of [[10, 4], [8, 2], [4, 4], [128, 8], [7, 3]] as const) {
      for (const r of ranks(ep)) {
        const a = expertParallel(E, r, ep, placement);
        assert.deepEqual(heldExperts({ numExperts: E, localExperts: a.local } as MoeConfig), a.experts);
        for (let e = 0; e < E; e++) assert.equal(localExpertSlot(a.local, e), a.globalToLocal[e], `${placement} ${E}/${ep} rank ${r} expert ${e}`);
        assert.deepEqual([...toLocalSlots(Int32Array.from({ length: E }, (_, e) => e), a.local)], [...a.globalToLocal]);
      }
    }
  }
});

test('byteRanges: a loader reading them with positioned reads gets readShard\'s bytes, adjacent rows joined', () => {
  const [R, C] = [4, 6];
  const full = iota(R * C);
  const bytes = new Uint8Array(full.buffer);
  for (const s of [columnParallel(R, C, 1, 2), rowParallel(R, C, 1, 3), mergedColumnParallel([2, 2], C, 0, 2), vocabParallel(R, C, 0, 1)]) {
    const out = new Uint8Array(numShardElements(s) * 4);
    let at = 0;
    for (const { offset, bytes: n } of byteRanges(s, 4)) { out.set(bytes.subarray(offset, offset + n), at); at += n; }
    assert.deepEqual(new Float32Array(out.buffer), readShard(full, s));
  }
  assert.equal(byteRanges(columnParallel(R, C, 1, 2), 2).length, 1);
  assert.equal(byteRanges(rowParallel(R, C, 1, 3), 2).length, R);
  assert.deepEqual(byteRanges(rowParallel(R, C, 0, 1), 2), [{ offset: 0, bytes: R * C * 2 }]);
});
