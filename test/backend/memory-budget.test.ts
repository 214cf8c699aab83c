// The KV cache budget follows vLLM's --gpu-memory-utilization: a fraction of the device for this engine,
// whatever other processes hold, capped by the memory actually free.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { freeKvBudget, kvCacheBudget } from '../../src/backend/cuda/memory-budget.js';

const GiB = 2 ** 30;

test('alone on the device: the fraction of the total, less what the engine holds and the activation reserve', () => {
  // 80 GiB device, 79.5 free at start (the context), 2 GiB of weights loaded since
  assert.equal(kvCacheBudget({ totalBytes: 80 * GiB, freeAtStartBytes: 79.5 * GiB, freeBytes: 77.5 * GiB, allocatedBytes: 2 * GiB,
    gpuMemoryUtilization: 0.9, reserveBytes: 1 * GiB }), 72 * GiB - 2 * GiB - 1 * GiB);
});

test('beside another engine: what the other holds does not count against this one\'s fraction', () => {
  // another server holds 30 GiB; this one at 0.4 gets 32 GiB less its 2 GiB of weights
  assert.equal(kvCacheBudget({ totalBytes: 80 * GiB, freeAtStartBytes: 49.5 * GiB, freeBytes: 47.5 * GiB, allocatedBytes: 2 * GiB,
    gpuMemoryUtilization: 0.4, reserveBytes: 0 }), 30 * GiB);
});

test('never more than the memory free, never negative', () => {
  assert.equal(kvCacheBudget({ totalBytes: 80 * GiB, freeAtStartBytes: 20 * GiB, freeBytes: 18 * GiB, allocatedBytes: 2 * GiB,
    gpuMemoryUtilization: 0.9, reserveBytes: 1 * GiB }), 17 * GiB);
  assert.equal(kvCacheBudget({ totalBytes: 80 * GiB, freeAtStartBytes: 80 * GiB, freeBytes: 10 * GiB, allocatedBytes: 2 * GiB,
    gpuMemoryUtilization: 0.1, reserveBytes: 1 * GiB }), 0);
});

test('another process freeing memory after the start does not make this engine\'s holdings look smaller', () => {
  // 30 GiB held by another process at the start, freed since; this engine holds 2 GiB of weights
  assert.equal(kvCacheBudget({ totalBytes: 80 * GiB, freeAtStartBytes: 49.5 * GiB, freeBytes: 77.5 * GiB,
    allocatedBytes: 2 * GiB, gpuMemoryUtilization: 0.9, reserveBytes: 1 * GiB }), 72 * GiB - 2 * GiB - 1 * GiB);
});

test('an explicit KV budget is capped by the free memory less the reserve alone, whatever else is held', () => {
  assert.equal(freeKvBudget({ freeBytes: 10 * GiB, reserveBytes: 1 * GiB }), 9 * GiB);
  assert.equal(freeKvBudget({ freeBytes: 0.5 * GiB, reserveBytes: 1 * GiB }), 0);
});
