// The GGUF GEMV's launch per segment (gguf-gemv-plan.ts): how many warps share a weight row (split), from the
// segment's rows and K only, so enough warps stream a small projection; every launch covers its rows exactly.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { GGUF_GEMV_TARGET_WARPS, ggufGemvLaunch, ggufGemvSplit } from '../../src/backend/cuda/gguf-gemv-plan.js';
import { GGUF_GEMV_ROWS, GGUF_GEMV_WARPS } from '../../src/backend/cuda/gguf-layout.js';
import { readKnob } from '../../src/knobs/knobs.js';

test('an 8B model\'s projections: gate_up and lm_head one warp a row pair; o, down and qkv\'s parts split', () => {
  const at = (rows: number, K: number): number => ggufGemvSplit(rows, K);
  assert.equal(at(24576, 4096), 1, 'gate_up: 12288 warps already');
  assert.equal(at(151936, 4096), 1, 'lm_head');
  assert.equal(at(4096, 4096), 2, 'o: 2048 warps, 4096 split in two');
  assert.equal(at(4096, 12288), 2, 'down');
  assert.equal(at(5120, 4096), 2, 'qkv\'s Q4_K q and k');
  assert.equal(at(1024, 4096), 4, 'qkv\'s Q6_K v: 512 warps, at most 4 a row');
  assert.equal(at(1024, 2048), 2, 'K = 2048: 64 pieces a row, two warps of 32 lanes');
  assert.equal(at(1024, 1024), 1, 'K = 1024: a warp\'s lanes take every piece');
  assert.equal(at(90, 3072), 2, 'K / 1024 = 3: the largest power of two under it');
});

test('the split: a power of two up to the block\'s warps, no lane without a piece, the target reached where allowed', () => {
  fc.assert(fc.property(fc.integer({ min: 1, max: 200000 }), fc.integer({ min: 1, max: 1024 }), (rows, k32) => {
    const K = 32 * k32;
    const s = ggufGemvSplit(rows, K);
    assert.ok([1, 2, 4].includes(s) && s <= GGUF_GEMV_WARPS, `split ${s}`);
    assert.ok(s === 1 || K / 32 >= 32 * s, `rows ${rows}, K ${K}: split ${s} leaves lanes without a piece`);
    const warps = Math.ceil(rows / GGUF_GEMV_ROWS);
    // one split less would still have reached the target: the smallest that does
    if (s > 1) assert.ok(warps * (s / 2) < GGUF_GEMV_TARGET_WARPS, `rows ${rows}, K ${K}: split ${s}`);
    // short of the target only where a larger split is not allowed
    if (warps * s < GGUF_GEMV_TARGET_WARPS) assert.ok(s === GGUF_GEMV_WARPS || K / 32 < 64 * s, `rows ${rows}, K ${K}`);
  }));
});

test('a launch covers its rows exactly, in blocks of the warps over the split times the rows a warp', () => {
  fc.assert(fc.property(fc.integer({ min: 1, max: 200000 }), fc.integer({ min: 1, max: 1024 }),
    fc.constantFrom('auto', '1', '2', '4'), (rows, k32, forced) => {
      const l = ggufGemvLaunch(rows, 32 * k32, forced as 'auto' | '1' | '2' | '4');
      if (forced !== 'auto') assert.equal(l.split, Number(forced));
      assert.equal(l.rowsPerBlock, (GGUF_GEMV_WARPS / l.split) * GGUF_GEMV_ROWS);
      assert.ok(l.grid * l.rowsPerBlock >= rows && (l.grid - 1) * l.rowsPerBlock < rows);
    }));
});

test('QUIRE_GGUF_GEMV_SPLIT: auto by default (0 too), 1, 2 or 4 forced, anything else refused', () => {
  const read = (v: string | undefined): string => {
    const before = process.env.QUIRE_GGUF_GEMV_SPLIT;
    if (v === undefined) delete process.env.QUIRE_GGUF_GEMV_SPLIT;
    else process.env.QUIRE_GGUF_GEMV_SPLIT = v;
    try {
      return readKnob('QUIRE_GGUF_GEMV_SPLIT');
    } finally {
      if (before === undefined) delete process.env.QUIRE_GGUF_GEMV_SPLIT;
      else process.env.QUIRE_GGUF_GEMV_SPLIT = before;
    }
  };
  assert.equal(read(undefined), 'auto');
  assert.equal(read('0'), 'auto');
  assert.equal(read('4'), '4');
  assert.throws(() => read('3'), /QUIRE_GGUF_GEMV_SPLIT/);
});

// 16 (two GEMV passes of 8 read the blocks twice, the bf16 path ~8 times) lost on the H200 at batch 16 of an 8B
// Q4_K_M model: 1288 tokens/s against 1517 dequantized (session 35), the GEMV's per-token cost being what grows
test('QUIRE_GGUF_GEMV_TOKENS defaults to 8: one GEMV pass, larger steps dequantized', () => {
  const before = process.env.QUIRE_GGUF_GEMV_TOKENS;
  delete process.env.QUIRE_GGUF_GEMV_TOKENS;
  try {
    assert.equal(readKnob('QUIRE_GGUF_GEMV_TOKENS'), 8);
  } finally {
    if (before !== undefined) process.env.QUIRE_GGUF_GEMV_TOKENS = before;
  }
});
