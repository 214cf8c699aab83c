import { test } from 'node:test';
import assert from 'node:assert/strict';
import { argmax, logSumExp, topIds } from '../../src/backend/sampling/select.js';
import { Rng } from '../../src/backend/sampling/rng.js';

function sortedIds(values: Float32Array, base: number, n: number): number[] {
  const ids = Array.from({ length: n }, (_, i) => i).filter((i) => values[base + i]! > -Infinity);
  return ids.sort((a, b) => values[base + b]! - values[base + a]! || a - b);
}

test('topIds equals the best-first prefix of a full sort, ties to the lower id', () => {
  const rng = new Rng(3);
  for (let trial = 0; trial < 50; trial++) {
    const n = 1 + Math.floor(rng.nextFloat() * 300);
    const base = 7;
    const values = new Float32Array(base + n);
    // Few distinct values so that ties are common; some masked entries.
    for (let i = 0; i < n; i++) values[base + i] = rng.nextFloat() < 0.1 ? -Infinity : Math.floor(rng.nextFloat() * 20);
    const k = 1 + Math.floor(rng.nextFloat() * n);
    assert.deepEqual([...topIds(values, base, n, k)], sortedIds(values, base, n).slice(0, k));
  }
});

test('topIds over a candidate list picks only from it', () => {
  const values = Float32Array.from([5, 9, 1, 8, 7]);
  assert.deepEqual([...topIds(values, 0, 5, 2, Int32Array.from([0, 2, 3, 4]))], [3, 4]);
});

test('argmax takes the lowest id among ties and skips NaN', () => {
  assert.equal(argmax(Float32Array.from([1, NaN, 3, 3, 2]), 0, 5), 2);
  assert.equal(argmax(Float32Array.from([-Infinity, -Infinity]), 0, 2), -1);
});

test('logSumExp matches the direct formula', () => {
  const values = Float32Array.from([0.5, -1, 2, -Infinity]);
  const { max, logZ } = logSumExp(values, 0, 4);
  assert.equal(max, 2);
  assert.ok(Math.abs(logZ - Math.log(Math.exp(0.5) + Math.exp(-1) + Math.exp(2))) < 1e-12);
});
