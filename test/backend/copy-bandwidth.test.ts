// The copy-bandwidth measurement falls back to smaller buffers when the device
// is full (the KV cache has taken its share), and never hides other failures.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { COPY_BANDWIDTH_BYTES, firstThatFits } from '../../src/backend/cuda/bandwidth.js';

const oom = () => new Error('cuMemAlloc_v2 failed: CUDA_ERROR_OUT_OF_MEMORY (2)');

test('firstThatFits measures at the largest size that allocates', () => {
  const tried: number[] = [];
  const rate = firstThatFits(COPY_BANDWIDTH_BYTES, (bytes) => {
    tried.push(bytes);
    if (bytes > COPY_BANDWIDTH_BYTES[1]!) throw oom();
    return bytes / 1000;
  });
  assert.deepEqual(tried, COPY_BANDWIDTH_BYTES.slice(0, 2));
  assert.equal(rate, COPY_BANDWIDTH_BYTES[1]! / 1000);
  assert.ok(COPY_BANDWIDTH_BYTES.every((b) => b >= 128 << 20), 'every size spans far more than L2');
});

test('firstThatFits rethrows other errors at once, and out-of-memory at the smallest size', () => {
  let calls = 0;
  assert.throws(() => firstThatFits(COPY_BANDWIDTH_BYTES, () => {
    calls++;
    throw new Error('CUDA_ERROR_ILLEGAL_ADDRESS');
  }), /ILLEGAL_ADDRESS/);
  assert.equal(calls, 1);
  assert.throws(() => firstThatFits(COPY_BANDWIDTH_BYTES, () => { throw oom(); }), /OUT_OF_MEMORY/);
});
