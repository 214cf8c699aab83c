// When the batch-invariant mode's one-token steps run fused (kernels/decode_layers.cu), and how its buffers
// are laid out: pure functions of the model's shape and the SM count.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { FUSED_STAGES, fusedUnsupported, groupOf, planFusedDecode, stageTimes } from '../../src/backend/cuda/fused-decode.js';

const QWEN3_06B = { hidden: 1024, inter: 3072, numHeads: 16, numKvHeads: 8, headDim: 128 };
const QWEN3_8B = { hidden: 4096, inter: 12288, numHeads: 32, numKvHeads: 8, headDim: 128 };

test('the qwen3 shapes run fused; head dims, widths and head counts it has no kernel for do not', () => {
  assert.equal(fusedUnsupported(QWEN3_06B), null);
  assert.equal(fusedUnsupported(QWEN3_8B), null);
  assert.match(fusedUnsupported({ ...QWEN3_8B, headDim: 256 }) ?? '', /head dim 256/);
  assert.match(fusedUnsupported({ ...QWEN3_8B, hidden: 5120 }) ?? '', /hidden 5120/);
  assert.match(fusedUnsupported({ ...QWEN3_8B, inter: 12296 }) ?? '', /intermediate 12296/);
  assert.match(fusedUnsupported({ ...QWEN3_8B, numHeads: 36, numKvHeads: 8 }) ?? '', /36 heads over 8/);
  assert.throws(() => planFusedDecode({ ...QWEN3_8B, headDim: 256 }, 132), /fused decode: head dim 256/);
});

test('plan: kernel per (D, G), attention blocks spread over the SMs, scratch ending in the mlp output', () => {
  assert.equal(groupOf(16, 8), 2);
  assert.equal(groupOf(32, 8), 4);
  assert.equal(groupOf(12, 4), 1);
  const p = planFusedDecode(QWEN3_06B, 132);
  assert.equal(p.kernel, 'decode_layers_d128_g2');
  assert.equal(p.grid, 264);  // two blocks per SM
  assert.equal(planFusedDecode(QWEN3_06B, 132, 1).grid, 132, 'no more blocks than fit at once');
  assert.equal(planFusedDecode(QWEN3_06B, 132, 4).grid, 264, 'no more than the kernel is built for');
  assert.equal(planFusedDecode(QWEN3_06B, 132, 1).attnZ, 16);
  assert.throws(() => planFusedDecode(QWEN3_06B, 132, 0), /no block fits/);
  assert.equal(p.attnZ, 16);  // 8 rows of 2 heads, 16 splits at most
  assert.equal(planFusedDecode(QWEN3_8B, 132).attnZ, 16);
  assert.equal(planFusedDecode({ ...QWEN3_8B, numHeads: 64, numKvHeads: 64 }, 132).attnZ, 4);
  assert.equal(p.sharedBytes, 1024 * 2 + 4 * 16384);  // the normed row, then each warp's 16 KiB GEMM stream
  const qkv = (16 + 16) * 128;
  assert.equal(p.mlpOffset, qkv + 16 * 128 + 1024 + 3072);
  assert.equal(p.scratchElements, p.mlpOffset + 1024);
  assert.equal(p.mlpOffset % 8, 0, 'the mlp output is 16-byte aligned for the next norm\'s loads');
  // gate_up: 384 tiles of 4 slices (K 1024: 32 chunks, 8 per slice) is the most items; its tiles the most counters
  assert.equal(p.partialBytes, 384 * 4 * 16 * 4);
  assert.equal(p.counterBytes, (32 + 384) * 4);
});

test('timeline: per stage, from the last release before to the last release (span) and the last arrival (work)', () => {
  // 2 blocks, 2 layers: 12 barriers; barrier b: block 0 arrives at 100 b, block 1 at 100 b + 30 + b, both leave at
  // 100 b + 50 + b
  const numBlocks = 2;
  const stamps = new BigUint64Array(2 * FUSED_STAGES.length * numBlocks * 2);
  for (let b = 0; b < 2 * FUSED_STAGES.length; b++) {
    stamps.set([BigInt(100 * b), BigInt(100 * b + 50 + b), BigInt(100 * b + 30 + b), BigInt(100 * b + 50 + b)],
      b * numBlocks * 2);
  }
  const times = stageTimes(stamps, numBlocks, 2);
  assert.deepEqual(times.map((t) => t.stage), [...FUSED_STAGES]);
  // barrier b >= 1: span = (100 b + 50 + b) - (100 (b - 1) + 50 + b - 1) = 101, work = (100 b + 30 + b) - (same) = 81
  assert.deepEqual([times[0]!.spanNs, times[0]!.workNs], [101, 81], 'qkv: layer 1 only (no barrier before layer 0\'s)');
  assert.deepEqual([times[1]!.spanNs, times[1]!.workNs], [202, 162], 'rope: both layers');
  assert.deepEqual([times[5]!.spanNs, times[5]!.workNs], [202, 162], 'down: both layers');
});
