// Which tensor-core prefill instantiation a model's heads get, and what it is launched with.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { prefillKernelShape } from '../../src/backend/cuda/attention-launch.js';

test('head dim 128: four heads of a kv head a block where the group allows, else two, else one', () => {
  const four = prefillKernelShape(128, 4);
  assert.deepEqual([four.name, four.headsPerBlock, four.threads], ['attention_prefill_bf16_d128_h4', 4, 512]);
  assert.equal(prefillKernelShape(128, 8).name, 'attention_prefill_bf16_d128_h4');
  const two = prefillKernelShape(128, 2);
  assert.deepEqual([two.name, two.headsPerBlock, two.threads], ['attention_prefill_bf16_d128', 2, 256]);
  assert.equal(prefillKernelShape(128, 6).name, 'attention_prefill_bf16_d128');
  const one = prefillKernelShape(128, 1);
  assert.deepEqual([one.name, one.headsPerBlock, one.threads], ['attention_prefill_bf16_d128_h1', 1, 128]);
  // bf16 rows padded to 136: K and V in 2 stages of 32 keys, then Q of each head's 64 rows
  assert.equal(two.sharedBytes, (2 * 2 * 32 + 2 * 64) * 136 * 2);
  assert.equal(four.sharedBytes, (2 * 2 * 32 + 4 * 64) * 136 * 2);
  assert.equal(one.sharedBytes, 2 * 2 * 32 * 136 * 2);
});

test('head dims 64 and 256 keep a head a block and a warp per 16 rows', () => {
  for (const D of [64, 256]) {
    const k = prefillKernelShape(D, 4);
    assert.deepEqual([k.name, k.headsPerBlock, k.threads], [`attention_prefill_bf16_d${D}`, 1, 128]);
  }
});

test('an unknown head dim or instantiation, or more heads a block than the group holds, is refused by name', () => {
  assert.throws(() => prefillKernelShape(96, 2), /no tensor-core kernel for head dim 96/);
  assert.throws(() => prefillKernelShape(128, 2, '_zz'), /attention_prefill_bf16_d128_zz/);
  assert.throws(() => prefillKernelShape(128, 6, '_h4'), /a multiple of 4, got 6/);
});

test('an FP8 cache: the _fp8 build, one bf16 K and V tile (widened from the byte tiles), then the byte stages', () => {
  const two = prefillKernelShape(128, 2, undefined, 'bf16_fp8');
  assert.deepEqual([two.name, two.headsPerBlock, two.threads], ['attention_prefill_bf16_fp8_d128', 2, 256]);
  assert.equal(two.sharedBytes, (2 * 32 + 2 * 64) * 136 * 2 + 2 * 2 * 32 * 128);
  const d64 = prefillKernelShape(64, 4, undefined, 'bf16_fp8');
  assert.deepEqual([d64.name, d64.sharedBytes], ['attention_prefill_bf16_fp8_d64', 2 * 64 * 72 * 2 + 2 * 2 * 64 * 64]);
});
