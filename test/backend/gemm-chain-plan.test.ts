// Which GEMMs the chain kernel takes: up to 8 tokens, K a multiple of its 64-k stage; weight rows enough for 1.5 tiles
// of 16 rows per SM take the ring, fewer gemm_chain_whole where a warp's 8 rows fit its shared memory (else cuBLASLt).

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { CHAIN_MAX_TOKENS, chainNormPartsBytes, chainNormRole, planChainGemm, wholeSplit } from '../../src/backend/cuda/gemm-chain.js';

const SMS = 132;

test('the chain kernel takes 1 to 8 tokens of wide weights, one warp per 16 rows', () => {
  for (const T of [1, 5, CHAIN_MAX_TOKENS]) {
    const plan = planChainGemm(T, 4096, 512, SMS);
    assert.deepEqual(plan?.grid, [256, 1, 1]);
    assert.equal(plan?.block, 32);
    assert.equal(plan?.kernel, 'gemm_chain');
    assert.equal(plan?.sharedBytes, 16 * (128 + 64) * 16, '16 stages of 16 weight rows and 8 tokens by 64 k');
  }
  assert.equal(planChainGemm(0, 4096, 1024, SMS), null);
  assert.equal(planChainGemm(CHAIN_MAX_TOKENS + 1, 4096, 1024, SMS), null);
});

test('K off the 64-k stage or ragged rows go to cuBLASLt', () => {
  assert.equal(planChainGemm(1, 4096, 1000, SMS), null, 'K % 64');
  assert.equal(planChainGemm(1, 4104, 1024, SMS), null, 'N % 16');
});

test('under 1.5 tiles of 16 rows per SM: gemm_chain_whole, 8 rows a warp read whole, up to 8 tokens, within 99 KiB', () => {
  assert.equal(planChainGemm(1, 3168, 512, SMS)?.kernel, 'gemm_chain', '198 tiles: 1.5 per SM');
  assert.equal(planChainGemm(1, 3152, 512, SMS)?.kernel, 'gemm_chain_whole', '197 tiles');
  const down = planChainGemm(1, 1024, 3072, SMS);  // qwen3-0.6b's down: 64 tiles on 132 SMs
  assert.equal(down?.kernel, 'gemm_chain_whole_split');
  assert.deepEqual(down?.grid, [128, 1, 1], 'a warp per 8 rows');
  assert.equal(down?.block, 6 * 32, 'its 48 stages of k split between 6 warps');
  assert.equal(down?.sharedBytes, 48 * (64 + 8) * 16, '48 stages of 8 weight rows and 1 token by 64 k');
  const eight = planChainGemm(8, 1024, 3072, SMS);
  assert.equal(eight?.kernel, 'gemm_chain_whole_split', 'up to 8 tokens (QUIRE_CHAIN_WHOLE moves it)');
  assert.equal(planChainGemm(8, 1024, 1024, SMS)?.kernel, 'gemm_chain_whole', '16 stages: one warp');
  assert.equal(eight?.sharedBytes, 48 * (64 + 64) * 16, '48 stages of 8 weight rows and 8 tokens by 64 k');
  assert.equal(planChainGemm(1, 1024, 5632, SMS)?.sharedBytes, 99 * 1024, '88 stages: 99 KiB');
  assert.equal(planChainGemm(1, 1024, 5696, SMS), null, '89 stages');
  assert.equal(planChainGemm(1, 1024, 3072, SMS, 'pairs'), null, 'no silu_mul: gate_up, then silu_mul');
  assert.equal(planChainGemm(1, 1024, 1024, SMS, 'none', true)?.kernel, 'gemm_chain_fp8', 'block FP8: the ring');
});

test('silu_mul as pairs: a warp a tile of 8 gate rows and their 8 up rows, the plain chain\'s grid and ring', () => {
  const plan = planChainGemm(1, 6144, 512, SMS, 'pairs');
  assert.equal(plan?.kernel, 'gemm_chain_silu_pair');
  assert.deepEqual(plan?.grid, [384, 1, 1]);
  assert.equal(plan?.sharedBytes, 16 * (128 + 64) * 16);
  assert.equal(planChainGemm(1, 24576 * 2, 4096, SMS, 'pairs')?.kernel, 'gemm_chain_silu_pair_p8', 'qwen3-8b gate_up');
  assert.equal(planChainGemm(1, 6160, 512, SMS, 'pairs')?.kernel, 'gemm_chain_silu_pair', 'halves of 3,080: whole pairs');
  assert.equal(planChainGemm(1, 6152, 512, SMS, 'pairs'), null, 'halves of 3,076 rows');
  const fp8 = planChainGemm(1, 2048, 1024, SMS, 'pairs', true);
  assert.equal(fp8?.kernel, 'gemm_chain_silu_pair_fp8');
  assert.equal(fp8?.sharedBytes, 16 * (128 + 64) * 16 + Math.ceil(8 * 10 / 4) * 16, 'the scales of both halves\' blocks');
  assert.equal(planChainGemm(1, 2 * 1088, 1024, SMS, 'pairs', true), null, 'FP8 halves are whole 128-row blocks');
});

test('chains of K 4,096 and more read 8 stages of weights before the kernel before ends (the _p8 builds), shorter ones 4', () => {
  assert.equal(planChainGemm(1, 6144, 4096, SMS, 'none', false, false)?.kernel, 'gemm_chain_p8', 'qwen3-8b qkv');
  assert.equal(planChainGemm(1, 4096, 12288, SMS, 'none', false, false)?.kernel, 'gemm_chain_p8', 'qwen3-8b down');
  assert.equal(planChainGemm(1, 4096, 2048, SMS, 'none', false, false)?.kernel, 'gemm_chain', 'K 2,048');
});

test('FP8 chains: any width, stages of 128 k with their scales; long chains of narrow weights split k between two warps (_s2)', () => {
  const down = planChainGemm(1, 4096, 12288, SMS, 'none', true);
  assert.equal(down?.kernel, 'gemm_chain_fp8_p8_s2', 'qwen3-8b down: K 12,288, 256 tiles');
  assert.equal(down?.block, 64);
  // per warp: the ring, then 48 groups of scales for 8 tokens and the weight tile's
  assert.equal(down?.sharedBytes, 2 * (16 * (128 + 64) * 16 + Math.ceil(48 * 9 / 4) * 16));
  const qkv = planChainGemm(1, 6144, 4096, SMS, 'none', true);
  assert.equal(qkv?.kernel, 'gemm_chain_fp8_p8', 'qwen3-8b qkv: K 4,096, one warp a tile');
  assert.equal(qkv?.block, 32);
  assert.equal(qkv?.sharedBytes, 16 * (128 + 64) * 16 + Math.ceil(32 * 9 / 4) * 16);
  assert.equal(planChainGemm(1, 2 * 12288 * 4, 12288, SMS, 'none', true)?.kernel, 'gemm_chain_fp8_p8', 'wide: one warp a tile');
  assert.equal(planChainGemm(1, 1024, 3072, SMS, 'none', true)?.kernel, 'gemm_chain_fp8',
    'qwen3-0.6b down: narrow, yet on the chain (cuBLASLt\'s FP8 GEMM is slower there)');
  assert.equal(planChainGemm(1, 256, 8320, SMS, 'none', true)?.kernel, 'gemm_chain_fp8_p8', 'an odd count of groups: one warp');
  assert.equal(planChainGemm(1, 1024, 1000, SMS, 'none', true), null, 'K % 128');
});

test('gemm_chain_whole splits k of more than 16 stages between the fewest warps (2 to 8) that divide it into slices of 8 or fewer', () => {
  const demo = planChainGemm(1, 256, 1024, SMS);
  assert.equal(demo?.kernel, 'gemm_chain_whole', 'the demo model\'s down (K 1,024): one chain, cuBLASLt\'s bits');
  assert.equal(demo?.block, 32);
  const o = planChainGemm(1, 1024, 2048, SMS);
  assert.equal(o?.kernel, 'gemm_chain_whole_split', 'qwen3-0.6b\'s o: 4 slices of 8 stages');
  assert.equal(o?.block, 128);
  assert.equal(wholeSplit(16), 1, 'the demo model\'s K: whole');
  assert.equal(wholeSplit(16, 4), 1, 'whatever the slice');
  assert.equal(wholeSplit(17), 1, 'no 3 to 8 divides 17 stages');
  assert.equal(wholeSplit(40), 5, '4 would leave slices of 10: 5 slices of 8');
  assert.equal(wholeSplit(32, 16), 2, 'session 23\'s slices of 16');
  assert.equal(wholeSplit(48, 8), 6);
  assert.equal(wholeSplit(88, 8), 1, '11 or more slices: past 8 warps, whole');
  assert.equal(wholeSplit(48, 0), 1, '0: never split');
});

test('bf16 ring chains of K >= 1,024 on fewer than 4 tiles a SM split each tile\'s k between two warps (_s2), rings halved below K 4,096', () => {
  const qkv = planChainGemm(1, 4096, 1024, SMS);  // qwen3-0.6b: 256 tiles
  assert.equal(qkv?.kernel, 'gemm_chain_s2');
  assert.equal(qkv?.block, 64);
  assert.equal(qkv?.sharedBytes, 2 * 8 * (128 + 64) * 16, 'two rings of 8 stages: the unsplit block\'s shared memory');
  assert.equal(planChainGemm(8, 6144, 1024, SMS, 'pairs')?.kernel, 'gemm_chain_silu_pair_s2', 'qwen3-0.6b gate_up');
  const down = planChainGemm(1, 4096, 12288, SMS);  // qwen3-8b
  assert.equal(down?.kernel, 'gemm_chain_p8_s2');
  assert.equal(down?.sharedBytes, 2 * 16 * (128 + 64) * 16, 'two rings of 16 stages');
  assert.equal(planChainGemm(1, 24576 * 2, 4096, SMS, 'pairs')?.kernel, 'gemm_chain_silu_pair_p8', '3,072 tiles: one warp a tile');
  assert.equal(planChainGemm(1, 4096, 512, SMS)?.kernel, 'gemm_chain', 'K 512: one warp (the demo model\'s K 256 too)');
  assert.equal(planChainGemm(1, 4096, 1024, SMS, 'none', false, false)?.kernel, 'gemm_chain', 'splitK false');
});

test('early8 false (QUIRE_CHAIN_SHORT_RING\'s fallback): a long bf16 split on 8-stage rings, the 48 KiB block', () => {
  for (const [N, K, what] of [[5120, 17408, 'qwen3.5-27b down'], [5120, 6144, 'qwen3.5-27b o, out_proj'],
    [6144, 4096, 'qwen3-8b qkv']] as const) {
    assert.equal(planChainGemm(1, N, K, SMS)?.kernel, 'gemm_chain_p8_s2', `${what}: the plan`);
    const short = planChainGemm(1, N, K, SMS, 'none', false, true, false);
    assert.equal(short?.kernel, 'gemm_chain_s2', what);
    assert.equal(short?.sharedBytes, 2 * 8 * (128 + 64) * 16, `${what}: two rings of 8 stages`);
    assert.deepEqual(short?.grid, [N / 16, 1, 1]);
  }
  for (const K of [4096, 12288]) {
    assert.equal(planChainGemm(1, 2048, K, SMS, 'none', true, true, false)?.kernel,
      planChainGemm(1, 2048, K, SMS, 'none', true)?.kernel, `FP8 keeps its _p8 builds (K ${K})`);
  }
  assert.equal(planChainGemm(1, 4096, 512, SMS, 'none', false, true, false)?.kernel, 'gemm_chain', 'K 512: unsplit');
});

test('norms inside the chains: bf16 producers of one output a row and a grid of 4k blocks, bf16 ring consumers', () => {
  const role = (T: number, N: number, K: number, silu: 'none' | 'pairs' = 'none', fp8 = false) =>
    chainNormRole(planChainGemm(T, N, K, SMS, silu, fp8)!);
  assert.deepEqual(role(1, 1024, 2048), { producer: true, consumer: false }, 'qwen3-0.6b\'s o: gemm_chain_whole_split');
  assert.deepEqual(role(1, 4096, 1024), { producer: true, consumer: true }, 'qwen3-0.6b\'s qkv: the _s2 ring');
  assert.deepEqual(role(1, 6144, 1024, 'pairs'), { producer: false, consumer: true }, 'gate_up + silu: two outputs a row');
  assert.deepEqual(role(1, 4096, 4096, 'none', true), { producer: false, consumer: false }, 'block-FP8 weights');
  assert.equal(chainNormRole({ kernel: 'gemm_chain_whole', grid: [34, 1, 1], block: 32, sharedBytes: 0 }).producer, false,
    '34 blocks: the sums not whole 16-byte pieces');
  assert.equal(chainNormPartsBytes(1, 128), 512);
  assert.equal(chainNormPartsBytes(3, 4), 48);
  assert.equal(chainNormPartsBytes(1, 2), 16, 'whole 16-byte pieces');
});
