// Plans of the device's mixture of experts (moe-plan.ts): the grids are a function of the shapes alone, and the tile
// bound covers every routing (adversarial ones included); the grids cover every output; the kernels named are ones
// moe.cu builds; decode steps take the split variants, prefill chunks the tiled ones (or moe_wgmma.cu's from a
// threshold); the tile lists the grouping writes give every grouped position to exactly one block, in order, within
// the grid; block-FP8 experts take the _fp8 builds of the same variants, their slices whole 128-k scale groups.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { blockTile, defaultVariant, GEMM_ROWS_VARIANTS, type GemmRowsVariant, sliceChunks }
  from '../../src/backend/cuda/gemm-rows.js';
import { expertTileList, FP8_CHUNK_K, fp8NumSlices, fp8SliceChunks, maxExpertTiles, MOE_FP8_SPLIT_WARPS, MOE_WGMMA_STAGES, moeBuildLists,
  MOE_TILED_FROM_ROWS, MOE_TILED_FROM_ROWS_FP8, moeVariant, planMoe, tileLists } from '../../src/backend/cuda/moe-plan.js';
import { seededRandom } from '../../src/model/random-weights.js';

/** Tiles of BN the grouped GEMMs walk for this routing (each row's k experts distinct). */
function tilesOf(chosen: number[][], E: number, BN: number): number {
  const counts = new Array<number>(E).fill(0);
  for (const row of chosen) for (const e of row) counts[e]!++;
  return counts.reduce((n, c) => n + Math.ceil(c / BN), 0);
}

test('the tile bound covers any routing: random, all rows on the same experts, every expert once', () => {
  fc.assert(fc.property(fc.integer({ min: 1, max: 400 }), fc.integer({ min: 1, max: 160 }), fc.integer({ min: 1, max: 8 }),
    fc.constantFrom(8, 16, 32, 128), fc.integer(), (T, E0, k0, BN, seed) => {
      const E = Math.max(E0, k0);
      const k = Math.min(k0, E);
      const rand = seededRandom(seed);
      const random = Array.from({ length: T }, () => {
        const order = Array.from({ length: E }, (_, e) => e).sort(() => rand() - 0.5);
        return order.slice(0, k);
      });
      const same = Array.from({ length: T }, () => Array.from({ length: k }, (_, j) => j));
      const spread = Array.from({ length: T }, (_, t) => Array.from({ length: k }, (_, j) => (t * k + j) % E));
      const bound = maxExpertTiles(T, E, k, BN);
      for (const chosen of [random, same, spread]) assert.ok(tilesOf(chosen, E, BN) <= bound, `T ${T} E ${E} k ${k} BN ${BN}`);
    }));
});

test('a tile list gives each grouped position to one block, experts and tiles in order, then empty entries to the grid', () => {
  fc.assert(fc.property(fc.array(fc.integer({ min: 0, max: 70 }), { minLength: 1, maxLength: 40 }),
    fc.constantFrom(8, 16, 32, 128), fc.integer({ min: 0, max: 5 }), (counts, BN, spare) => {
      const P = counts.reduce((a, b) => a + b, 0);
      const real = counts.reduce((n, c) => n + Math.ceil(c / BN), 0);
      const list = expertTileList(counts, BN, real + spare);
      const owner = new Array<number>(P).fill(0);
      let last = -1;
      for (let y = 0; y < list.length / 4; y++) {
        const [e, first, count, tok0] = list.subarray(4 * y, 4 * y + 4);
        if (y >= real) {
          assert.deepEqual([e, first, count, tok0], [-1, 0, 0, 0]);
          continue;
        }
        assert.ok(e! >= last, 'experts in order');
        last = e!;
        assert.equal(count, counts[e!]);
        assert.equal(first, counts.slice(0, e!).reduce((a, b) => a + b, 0));
        assert.ok(tok0! % BN === 0 && tok0! < count!);
        for (let t = tok0!; t < Math.min(tok0! + BN, count!); t++) owner[first! + t]!++;
      }
      assert.ok(owner.every((n) => n === 1), 'each grouped position once');
    }));
  assert.throws(() => expertTileList([9], 8, 1), /more than 1 tiles of 8/);
});

test('one tile list serves both GEMMs where their tiles match, else each has its own of its grid\'s height', () => {
  const one = planMoe(1, 128, 8, 2048, 768);
  assert.deepEqual(tileLists(one), [{ tokens: 8, entries: 8 }]);
  const two = planMoe(300, 8, 2, 2304, 64);
  assert.deepEqual(tileLists(two), [{ tokens: two.gateUp.tokens, entries: two.gateUp.grid[1] },
    { tokens: two.down.tokens, entries: two.down.grid[1] }]);
  assert.notEqual(two.gateUp.tokens, two.down.tokens);
});

test('every plan covers the outputs of an expert within a block\'s shared memory, on a kernel moe.cu builds', () => {
  const lists = moeBuildLists();
  const built = new Set<string>();
  for (const fp8 of ['', '_fp8']) {
    for (const [list, name] of [[lists.gateUpSplit, 'gate_up'], [lists.downSplit, 'down']] as const) {
      for (const m of list.matchAll(/X\((\d+), (\d+), \d+\)/g)) built.add(`moe_${name}${fp8}_split_m${m[1]}_n${m[2]}`);
    }
    for (const m of lists.tiled.matchAll(/X\((\d+), (\d+), (\d+), (\d+), \d+, \w+\)/g)) {
      for (const name of ['gate_up', 'down']) built.add(`moe_${name}${fp8}_tiled_w${m[1]}x${m[2]}_m${m[3]}_n${m[4]}`);
    }
  }
  fc.assert(fc.property(fc.integer({ min: 1, max: 4096 }), fc.constantFrom(8, 60, 128), fc.constantFrom(1, 2, 8),
    fc.integer({ min: 1, max: 600 }), fc.integer({ min: 1, max: 2000 }),
    fc.integer({ min: 0, max: GEMM_ROWS_VARIANTS.length }), (T, E, k, h8, i8, v) => {
      const [H, I] = [8 * h8, 8 * i8];
      const variant = GEMM_ROWS_VARIANTS[v];
      const plan = planMoe(T, E, k, H, I, variant);
      for (const [l, outputs, K, gateUp] of [[plan.gateUp, I, H, true], [plan.down, H, I, false]] as const) {
        assert.ok(built.has(l.kernel), `${l.kernel} is built`);
        const lv = l.variant!;
        const tile = blockTile(lv);
        const perBlock = lv.kind === 'split' ? 16 : gateUp ? tile.rows / 2 : tile.rows;
        assert.ok(l.grid[0] * perBlock >= outputs && (l.grid[0] - 1) * perBlock < outputs, `${l.kernel} covers ${outputs}`);
        assert.equal(l.grid[1], maxExpertTiles(T, E, k, lv.kind === 'split' ? 8 * lv.nt : tile.tokens));
        assert.equal(l.sliceChunks, sliceChunks(K));
        // gate_up's split blocks keep two m tiles of partials: up to 64 KiB (launch opts in past 48)
        assert.ok(l.sharedBytes <= (lv.smemSum ? 227 : lv.kind === 'split' ? 64 : 48) * 1024);
        assert.ok(l.block <= 512 && l.block % 32 === 0);
      }
    }));
  assert.throws(() => planMoe(1, 8, 2, 100, 64), /K 100 is not a multiple of 8/);
  // block FP8: H and I multiples of 128
  fc.assert(fc.property(fc.integer({ min: 1, max: 4096 }), fc.constantFrom(8, 60, 128), fc.constantFrom(1, 2, 8),
    fc.integer({ min: 1, max: 64 }), fc.integer({ min: 1, max: 120 }),
    fc.integer({ min: 0, max: GEMM_ROWS_VARIANTS.length }), (T, E, k, h, i, v) => {
      const [H, I] = [128 * h, 128 * i];
      const plan = planMoe(T, E, k, H, I, GEMM_ROWS_VARIANTS[v], undefined, true);
      for (const [l, K] of [[plan.gateUp, H], [plan.down, I]] as const) {
        assert.ok(built.has(l.kernel) && l.kernel.includes('_fp8_'), `${l.kernel} is an _fp8 build`);
        assert.equal(l.sliceChunks, fp8SliceChunks(K));
        if (l.variant!.kind === 'split') {
          assert.equal(l.block, 32 * fp8NumSlices(K), 'a warp a slice');
          assert.ok(l.block <= 32 * MOE_FP8_SPLIT_WARPS, 'within the _fp8 split builds\' launch bounds');
          assert.ok(l.sharedBytes <= 64 * 1024);
        }
      }
    }));
});

test('an FP8 slice is whole 128-k scale groups (chunks of 64 e4m3 in pairs), at most 8 of them over K, fixed by K', () => {
  for (let K = 128; K <= 16384; K += 128) {
    const c = fp8SliceChunks(K);
    assert.equal(c % 2, 0, `K ${K}: whole groups`);
    assert.ok(c >= 4, `K ${K}: at least two groups`);
    const slices = fp8NumSlices(K);
    assert.ok(slices >= 1 && slices <= MOE_FP8_SPLIT_WARPS && (slices - 1) * c < K / FP8_CHUNK_K && slices * c >= K / FP8_CHUNK_K);
  }
  assert.deepEqual([2048, 768, 4096].map(fp8SliceChunks), [4, 4, 8]);
  assert.throws(() => fp8SliceChunks(200), /FP8 K 200 is not a multiple of 128/);
});

test('decode steps stream each routed expert on the split variants, prefill chunks take the tiled ones', () => {
  // Qwen3-30B-A3B, one token: 8 experts of 48 tiles of 16 outputs (gate and up rows), K 2048 in 8 slices (8 warps)
  const one = planMoe(1, 128, 8, 2048, 768);
  assert.deepEqual([one.gateUp.kernel, one.gateUp.grid, one.gateUp.block], ['moe_gate_up_split_m2_n1', [48, 8, 1], 256]);
  assert.deepEqual([one.down.kernel, one.down.grid, one.down.block], ['moe_down_split_m1_n1', [128, 8, 1], 96]);
  // Mixtral, 16 tokens (4 an expert on average): one token tile of 8 (from 8 rows an expert: moeVariant's tiles)
  assert.equal(planMoe(16, 8, 2, 4096, 14336).gateUp.kernel, 'moe_gate_up_split_m2_n1');
  assert.match(planMoe(2048, 128, 8, 2048, 768).gateUp.kernel, /^moe_gate_up_tiled_/);
  assert.match(planMoe(8192, 8, 2, 4096, 14336).down.kernel, /^moe_down_tiled_w1x4/);
  // Qwen3-30B-A3B-FP8, one token: the same tiles, K 2048 in 8 slices of 2 scale groups, K 768 in 3
  const fp8 = planMoe(1, 128, 8, 2048, 768, undefined, undefined, true);
  assert.deepEqual([fp8.gateUp.kernel, fp8.gateUp.grid, fp8.gateUp.block], ['moe_gate_up_fp8_split_m2_n1', [48, 8, 1], 256]);
  assert.deepEqual([fp8.down.kernel, fp8.down.grid, fp8.down.block], ['moe_down_fp8_split_m1_n1', [128, 8, 1], 96]);
  assert.match(planMoe(2048, 128, 8, 2048, 768, undefined, undefined, true).gateUp.kernel, /^moe_gate_up_fp8_tiled_/);
});

test('from MOE_TILED_FROM_ROWS rows an expert bf16 experts take 64 x 32 tiles where gemm_rows would split', () => {
  assert.equal(MOE_TILED_FROM_ROWS, 8);
  const name = (v: GemmRowsVariant) => planMoe(1, 128, 8, 2048, 768, v).down.kernel;
  // qwen3-30b-a3b: 112 / 128 / 256 / 512 tokens give 7 / 8 / 16 / 32 rows an expert
  for (const [T, kernel] of [[112, 'split_m1_n1'], [128, 'tiled_w2x2_m2_n2'], [256, 'tiled_w2x2_m2_n2'],
    [512, 'tiled_w2x2_m2_n2'], [2048, 'tiled_w2x2_m2_n2']] as const) {
    assert.equal(planMoe(T, 128, 8, 2048, 768).down.kernel, `moe_down_${kernel}`, `${T} tokens`);
  }
  assert.equal(planMoe(256, 128, 8, 2048, 768).gateUp.kernel, 'moe_gate_up_tiled_w2x2_m2_n2');
  // threshold 0 and a wide output past 64 rows keep gemm_rows' default
  for (const [m, N] of [[16, 2048], [64, 4096], [128, 4096]] as const) {
    assert.equal(name(moeVariant(m, N, false, 0)), name(defaultVariant(m, N)), `threshold 0, ${m} rows`);
  }
  assert.equal(name(moeVariant(128, 4096, false)), 'moe_down_tiled_w1x4_m4_n4');
});

test('block-FP8 experts take their 64 x 32 tiles from MOE_TILED_FROM_ROWS_FP8 rows an expert, their split builds under it',
  () => {
  assert.equal(MOE_TILED_FROM_ROWS_FP8, 8);
  const fp8 = (T: number, threshold?: number) => planMoe(T, 128, 8, 2048, 768, threshold === undefined ? undefined
    : moeVariant(T * 8 / 128, 2048, true, threshold), undefined, true);
  // qwen3-30b-a3b: 112 / 128 / 512 / 1,024 tokens give 7 / 8 / 32 / 64 rows an expert (no wgmma path for FP8)
  assert.equal(fp8(112).down.kernel, 'moe_down_fp8_split_m1_n1');
  for (const T of [128, 256, 512, 1024]) {
    assert.equal(fp8(T).down.kernel, 'moe_down_fp8_tiled_w2x2_m2_n2', `${T} tokens`);
    assert.equal(fp8(T).gateUp.kernel, 'moe_gate_up_fp8_tiled_w2x2_m2_n2', `${T} tokens`);
  }
  // threshold 0: gemm_rows' default, a split build
  assert.equal(fp8(256, 0).down.kernel, 'moe_down_fp8_split_m1_n2');
});

test('from a wgmma threshold of rows an expert, bf16 experts take moe_wgmma.cu\'s builds; fp8 or a forced variant never',
  () => {
  // Qwen3-30B-A3B, 8,192 tokens: 512 rows an expert; token tiles of 128 (the grouping's list), outputs 64 (gate_up) and
  // 128 (down) a block, two warpgroups, MOE_WGMMA_STAGES stages of 32 KB plus 1 KB of alignment
  const p = planMoe(8192, 128, 8, 2048, 768, undefined, 0, false, 128, 64);
  assert.deepEqual([p.gateUp.file, p.gateUp.kernel, p.gateUp.grid, p.gateUp.block, p.gateUp.tokens],
    ['moe_wgmma.cu', 'moe_gate_up_wgmma', [12, maxExpertTiles(8192, 128, 8, 128), 1], 256, 128]);
  assert.deepEqual([p.down.file, p.down.kernel, p.down.grid],
    ['moe_wgmma.cu', 'moe_down_wgmma', [16, maxExpertTiles(8192, 128, 8, 128), 1]]);
  assert.equal(p.gateUp.sharedBytes, MOE_WGMMA_STAGES * 32768 + 1024);
  assert.deepEqual(tileLists(p), [{ tokens: 128, entries: maxExpertTiles(8192, 128, 8, 128) }]);
  // 63 rows an expert (T 1008): under the threshold; FP8 experts; a forced variant (tests); threshold 0: never
  assert.equal(planMoe(1008, 128, 8, 2048, 768, undefined, 0, false, 128, 64).gateUp.file, 'moe.cu');
  assert.equal(planMoe(1024, 128, 8, 2048, 768, undefined, 0, false, 128, 64).gateUp.file, 'moe_wgmma.cu');
  assert.equal(planMoe(8192, 128, 8, 2048, 768, undefined, 0, true, 128, 64).gateUp.file, 'moe.cu');
  assert.equal(planMoe(8192, 128, 8, 2048, 768, GEMM_ROWS_VARIANTS[4], 0, false, 128, 64).gateUp.file, 'moe.cu');
  assert.equal(planMoe(8192, 128, 8, 2048, 768).gateUp.file, 'moe.cu');
});

test('a decode batch of up to 64 rows takes the fused router: gemm_rows\' split m1 n1 tiles over every expert and row, its shared memory the partials and E cursors', () => {
  for (const [T, E, H] of [[1, 128, 2048], [8, 128, 2048], [9, 40, 264], [64, 512, 4096]] as const) {
    const r = planMoe(T, E, 8, H, 96).router!;
    assert.ok(r, `T ${T}`);
    assert.deepEqual(r.grid, [Math.ceil(E / 16), Math.ceil(T / 8), 1]);
    const slices = Math.ceil(Math.ceil(H / 32) / sliceChunks(H));
    assert.equal(r.block, 32 * Math.min(16, slices));
    assert.equal(r.sharedBytes, slices * 4 * 32 * 4 + 4 * (3 * E + 2));
    assert.equal(r.sliceChunks, sliceChunks(H));
  }
  assert.equal(planMoe(65, 128, 8, 2048, 768).router, null, 'more rows: the router GEMM, moe_route and moe_group');
});

test('expert parallel: the GEMMs\' tiles and the grouping bound by the rank\'s experts, the router\'s grid by all of them, the variant by rows an expert of all', () => {
  for (const [T, E, k, EL] of [[1, 128, 8, 32], [64, 128, 8, 16], [2048, 128, 8, 64], [300, 8, 2, 4]] as const) {
    const whole = planMoe(T, E, k, 256, 96);
    const local = planMoe(T, E, k, 256, 96, undefined, 64, false, EL);
    for (const g of ['gateUp', 'down'] as const) {
      assert.equal(local[g].kernel, whole[g].kernel, `${g}: the variant of T k / E rows an expert`);
      assert.equal(local[g].grid[1], maxExpertTiles(T, EL, k, local[g].tokens), `${g}: tiles of ${EL} experts`);
    }
    if (T <= 64) {
      assert.deepEqual(local.router!.grid, whole.router!.grid, 'the router over every expert');
      assert.equal(local.router!.sharedBytes - whole.router!.sharedBytes, 4 * 3 * (EL - E), 'moe_group\'s cursors of the local experts');
    }
  }
});
