import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Rng, rngForRequest } from '../../src/backend/sampling/rng.js';

function draws(rng: Rng, n: number): number[] {
  return Array.from({ length: n }, () => rng.nextFloat());
}

test('same seed gives the same stream, different seeds differ', () => {
  assert.deepEqual(draws(new Rng(42), 100), draws(new Rng(42), 100));
  assert.notDeepEqual(draws(new Rng(42), 100), draws(new Rng(43), 100));
  assert.notDeepEqual(draws(new Rng(-1), 100), draws(new Rng(2 ** 32 - 1), 100));
  assert.notDeepEqual(draws(new Rng(2 ** 40), 100), draws(new Rng(0), 100));
});

test('nextFloat is uniform in [0, 1)', () => {
  const rng = new Rng(7);
  const numBins = 10;
  const counts = new Array<number>(numBins).fill(0);
  const n = 100_000;
  for (const x of draws(rng, n)) {
    assert.ok(x >= 0 && x < 1);
    counts[Math.floor(x * numBins)]!++;
  }
  for (const c of counts) assert.ok(Math.abs(c / n - 1 / numBins) < 0.006, `bin share ${c / n}`);
});

test('rejects seeds that are not safe integers', () => {
  assert.throws(() => new Rng(1.5), RangeError);
  assert.throws(() => new Rng(2 ** 60), RangeError);
});

test('a seeded request gets its own stream, an unseeded one the engine stream', () => {
  const engine = new Rng(1);
  assert.equal(rngForRequest(null, engine), engine);
  const own = rngForRequest(5, engine);
  assert.notEqual(own, engine);
  assert.deepEqual(draws(own, 10), draws(new Rng(5), 10));
});
