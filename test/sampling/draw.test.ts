import { test } from 'node:test';
import assert from 'node:assert/strict';
import { TokenDrawer } from '../../src/backend/sampling/draw.js';
import { defaultSamplingParams, type SamplingParams } from '../../src/sampling/params.js';
import { Rng } from '../../src/backend/sampling/rng.js';
import { argmax } from '../../src/backend/sampling/select.js';

/** vLLM's order with a full sort: temperature, min-p, top-k, top-p. */
function referenceDistribution(logits: Float32Array, p: SamplingParams): number[] {
  const n = logits.length;
  const max = Math.max(...logits);
  let probs = Array.from(logits, (l) => Math.exp((l - max) / p.temperature));
  const normalise = () => {
    const z = probs.reduce((a, b) => a + b, 0);
    probs = probs.map((x) => x / z);
  };
  normalise();
  const pMax = Math.max(...probs);
  if (p.minP > 0) probs = probs.map((x) => (x < p.minP * pMax ? 0 : x));
  const order = Array.from({ length: n }, (_, i) => i).sort((a, b) => logits[b]! - logits[a]! || a - b);
  if (p.topK > 0 && p.topK < n) {
    const kth = logits[order[p.topK - 1]!]!;
    probs = probs.map((x, i) => (logits[i]! < kth ? 0 : x));
  }
  normalise();
  if (p.topP < 1) {
    let massBefore = 0;
    const kept = new Set<number>();
    for (const id of order) {
      if (probs[id] === 0) continue;
      if (massBefore >= p.topP) break;
      kept.add(id);
      massBefore += probs[id]!;
    }
    probs = probs.map((x, i) => (kept.has(i) ? x : 0));
    normalise();
  }
  return probs;
}

test('the truncated distribution matches a full-sort reference (random rows, ties, all knobs)', () => {
  const rng = new Rng(2024);
  for (let trial = 0; trial < 300; trial++) {
    const vocab = 2 + Math.floor(rng.nextFloat() * 400);
    const numLevels = 1 + Math.floor(rng.nextFloat() * 40);
    const row = Float32Array.from({ length: vocab }, () => (Math.floor(rng.nextFloat() * numLevels) / numLevels) * 8);
    const pick = (x: number, off: number) => (rng.nextFloat() < 0.5 ? off : x);
    const params = defaultSamplingParams({
      temperature: 0.2 + rng.nextFloat() * 2,
      topK: pick(1 + Math.floor(rng.nextFloat() * vocab), -1),
      topP: pick(0.05 + rng.nextFloat() * 0.95, 1),
      minP: pick(rng.nextFloat() * 0.5, 0),
    });
    const drawer = new TokenDrawer(vocab);
    const got = drawer.distribution(row, argmax(row, 0, vocab), params);
    const want = referenceDistribution(row, params);
    for (let i = 0; i < vocab; i++) {
      assert.equal(got[i]! > 0, want[i]! > 0, `trial ${trial} id ${i} ${JSON.stringify(params)}`);
      assert.ok(Math.abs(got[i]! - want[i]!) < 1e-9);
    }
  }
});

test('top-k 1 and top-p with one dominant token leave only the argmax', () => {
  const row = Float32Array.from([0.5, 3, 1, 3, -2]);
  const drawer = new TokenDrawer(row.length);
  const only1 = (p: Partial<SamplingParams>) => Array.from(drawer.distribution(row, 1, defaultSamplingParams(p)), (x) => (x > 0 ? 1 : 0));
  assert.deepEqual(only1({ topK: 1 }), [0, 1, 0, 1, 0]);
  assert.deepEqual(only1({ topP: 0.01 }), [0, 1, 0, 0, 0]);
});

test('draws are reproducible from the same RNG state and spread over the kept ids', () => {
  const vocab = 1000;
  const rng = new Rng(5);
  const row = Float32Array.from({ length: vocab }, () => rng.nextFloat() * 3);
  const drawer = new TokenDrawer(vocab);
  const params = defaultSamplingParams({ topP: 0.5, temperature: 0.7 });
  const greedy = argmax(row, 0, vocab);
  const probs = drawer.distribution(row, greedy, params);
  const a = new Rng(9);
  const b = new Rng(9);
  const seen = new Set<number>();
  for (let i = 0; i < 2000; i++) {
    const t = drawer.draw(row, greedy, params, a);
    assert.equal(t, drawer.draw(row, greedy, params, b));
    assert.ok(probs[t]! > 0);
    seen.add(t);
  }
  const numKept = probs.filter((x) => x > 0).length;
  assert.ok(seen.size > numKept * 0.9, `${seen.size} of ${numKept}`);
});
