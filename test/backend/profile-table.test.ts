// The CUDA profile table's arithmetic (no GPU needed): a step lasts its wall
// time when that exceeds the ops' span, and what no op covers is host gaps.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { formatProfile, profileTable } from '../../src/backend/cuda/profiler.js';

const ops = [
  { bucket: 'gemm qkv', startMs: 0, endMs: 2 }, { bucket: 'attention', startMs: 3, endMs: 4 },
  { bucket: 'gemm qkv', startMs: 4, endMs: 6 }, { bucket: 'norm', startMs: 9, endMs: 10 }];

test('profileTable charges wall time beyond the GPU span to host gaps; shares sum to 1', () => {
  const { rows, stepMs, gpuMs } = profileTable(ops, 16);
  assert.equal(stepMs, 16);
  assert.equal(gpuMs, 6);
  const by = Object.fromEntries(rows.map((r) => [r.bucket, r]));
  assert.equal(by['host gaps']!.totalMs, 10);
  assert.equal(by['gemm qkv']!.share, 4 / 16);
  assert.ok(Math.abs(rows.reduce((s, r) => s + r.share, 0) - 1) < 1e-12);
  assert.match(formatProfile(rows, stepMs, 'graph 8 (graph replay): step'), /^graph 8 \(graph replay\): step 16\.000 ms/);
});

test('profileTable without a wall time (or a shorter one) spans the ops', () => {
  for (const wallMs of [0, 5]) {
    const { rows, stepMs } = profileTable(ops, wallMs);
    assert.equal(stepMs, 10);
    assert.equal(rows.find((r) => r.bucket === 'host gaps')!.totalMs, 4);
  }
  assert.deepEqual(profileTable([]), { rows: [], stepMs: 0, gpuMs: 0 });
});
