// Verification of proposed tokens (speculative decoding) on the host sampler, driven directly: greedy rows accept
// the drafts that equal the argmax; sampled rows, by rejection sampling against a point-mass draft, emit at each
// position exactly the target's distribution (checked per position over many seeded draws: deterministic).

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { defaultSamplingParams } from '../../src/sampling/params.js';
import { Sampler } from '../../src/sampling/sampler.js';

const VOCAB = 6;
// three positions: the last token's (verifies draft 0), draft 0's (verifies draft 1), draft 1's (the bonus)
const ROWS = [[1.0, 2.0, 0.5, 1.5, -1.0, 0.0], [0.2, 1.1, 1.4, 0.0, 0.9, -0.5], [0.0, 0.3, -0.2, 1.2, 0.8, 1.0]];
const DRAFTS = [3, 4];
const T = 0.8;
const TOP_K = 4;
const PRESENCE = 0.5;

/** The target distribution a plain step would sample at a position, after `generated` tokens: penalties, T, top-k. */
function target(row: readonly number[], generated: readonly number[]): number[] {
  const l = row.map((v, i) => (generated.includes(i) ? v - PRESENCE : v));
  const kth = [...l].sort((a, b) => b - a)[TOP_K - 1]!;
  const max = Math.max(...l);
  const w = l.map((v) => (v >= kth ? Math.exp((v - max) / T) : 0));
  const z = w.reduce((a, b) => a + b, 0);
  return w.map((x) => x / z);
}

function chiSquare(counts: readonly number[], probs: readonly number[]): number {
  const n = counts.reduce((a, b) => a + b, 0);
  let chi = 0;
  probs.forEach((p, i) => {
    if (p === 0) assert.equal(counts[i], 0, `token ${i} is outside the target's support`);
    else chi += (counts[i]! - n * p) ** 2 / (n * p);
  });
  return chi;
}

test('rejection sampling keeps the target distribution at every position (penalties as if generated one a step)', () => {
  const sampler = new Sampler({ vocabSize: VOCAB, eosTokenIds: [0] });
  const state = sampler.newSequenceState(defaultSamplingParams({ temperature: T, topK: TOP_K, presencePenalty: PRESENCE, seed: 7 }), [1]);
  const logits = Float32Array.from(ROWS.flat());
  const N = 40_000;
  const at = [new Array<number>(VOCAB).fill(0), new Array<number>(VOCAB).fill(0), new Array<number>(VOCAB).fill(0)];
  for (let i = 0; i < N; i++) {
    const v = sampler.sample(logits, [state], [DRAFTS]).verified![0]!;
    assert.ok(v.tokenIds.length >= 1 && v.tokenIds.length <= 3);
    v.tokenIds.slice(0, -1).forEach((t, j) => assert.equal(t, DRAFTS[j], 'a kept token that is not the draft'));
    v.tokenIds.forEach((t, j) => at[j]![t]!++);
  }
  assert.equal(state.numOutputTokens, 0, 'verification left the state as it was');
  // chi-square with at most 3 degrees of freedom (top-4 support): 99.99% quantile ~21; a fixed seed, so no flake
  const expected = [target(ROWS[0]!, []), target(ROWS[1]!, [DRAFTS[0]!]), target(ROWS[2]!, DRAFTS)];
  expected.forEach((p, j) => {
    const chi = chiSquare(at[j]!, p);
    assert.ok(chi < 21, `position ${j}: chi-square ${chi.toFixed(1)} over ${at[j]!.reduce((a, b) => a + b, 0)} draws `
      + `(${at[j]!.join(' ')} against ${p.map((x) => x.toFixed(3)).join(' ')})`);
  });
  // each position is reached as often as the drafts before it are accepted
  assert.ok(Math.abs(at[1]!.reduce((a, b) => a + b, 0) / N - expected[0]![DRAFTS[0]!]!) < 0.01);
});

test('greedy verification accepts the drafts equal to the argmax, then the target\'s token; logprobs are the target\'s', () => {
  const sampler = new Sampler({ vocabSize: VOCAB, eosTokenIds: [0] });
  const logits = Float32Array.from(ROWS.flat());
  const greedy = (drafts: number[]) => {
    const state = sampler.newSequenceState(defaultSamplingParams({ temperature: 0, logprobs: 2 }), [1]);
    return sampler.sample(logits, [state], [drafts]).verified![0]!;
  };
  assert.deepEqual(greedy([1, 2]).tokenIds, [1, 2, 3], 'both drafts are the argmax: kept, then the bonus token');
  assert.deepEqual(greedy([1, 4]).tokenIds, [1, 2], 'the second draft is not: the target\'s token in its place');
  assert.deepEqual(greedy([0, 2]).tokenIds, [1], 'the first is not: one token, as without speculation');
  const lps = greedy([1, 2]).logprobs;
  const plain = new Sampler({ vocabSize: VOCAB, eosTokenIds: [0] });
  ROWS.forEach((row, j) => {
    const one = plain.sample(Float32Array.from(row), [plain.newSequenceState(defaultSamplingParams({ temperature: 0, logprobs: 2 }), [1])]);
    assert.deepEqual(lps[j], one.logprobs[0], `position ${j}: the logprob a plain step gives`);
  });
});
