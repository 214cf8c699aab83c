// Greedy verification from the device's argmax (speculative decoding's verify rows when every row is greedy) keeps
// exactly the tokens the host Sampler keeps from the full logits: random logits with ties, proposals that match the
// argmax for a while and then not, rows without proposals between them.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { defaultSamplingParams } from '../../src/sampling/params.js';
import { Sampler } from '../../src/sampling/sampler.js';
import { isGreedyVerifiable, verifyGreedy } from '../../src/sampling/greedy-verify.js';
import { Rng } from '../../src/backend/sampling/rng.js';

const V = 12;

/** The argmax of each row, ties to the lowest id (sample.cu's greedy). */
function argmaxRows(logits: Float32Array): Int32Array {
  return Int32Array.from({ length: logits.length / V }, (_, r) => {
    let best = 0;
    for (let i = 1; i < V; i++) if (logits[r * V + i]! > logits[r * V + best]!) best = i;
    return best;
  });
}

test('verifyGreedy keeps what the host Sampler keeps from the logits, row by row', () => {
  const rng = new Rng(7);
  const sampler = new Sampler({ vocabSize: V, eosTokenIds: [0] });
  for (let trial = 0; trial < 200; trial++) {
    const numSeqs = 1 + Math.floor(rng.nextFloat() * 4);
    // each sequence: 0 .. 4 proposals; logits of few distinct values, so ties are common
    const k = Array.from({ length: numSeqs }, () => Math.floor(rng.nextFloat() * 5));
    const logits = Float32Array.from({ length: k.reduce((a, x) => a + x + 1, 0) * V }, () => Math.floor(rng.nextFloat() * 4));
    const top = argmaxRows(logits);
    let at = 0;
    const drafts = k.map((n) => {
      // the first proposals follow the argmax (accepted), then one at random
      const d = Array.from({ length: n }, (_, j) => (rng.nextFloat() < 0.7 ? top[at + j]! : Math.floor(rng.nextFloat() * V)));
      at += n + 1;
      return n > 0 ? d : undefined;
    });
    const states = k.map(() => sampler.newSequenceState(defaultSamplingParams({ temperature: 0, ignoreEos: true }), [1]));
    const host = sampler.sample(logits, states, drafts);
    const device = verifyGreedy(top, drafts);
    assert.deepEqual(device.tokenIds, host.tokenIds);
    assert.deepEqual(device.verified!.map((v) => v?.tokenIds ?? null), host.verified!.map((v) => v?.tokenIds ?? null));
  }
  assert.throws(() => verifyGreedy(new Int32Array(3), [[1]]), /3 tokens for 2 rows/);
});

test('only greedy rows with nothing for the host to apply are verified from the argmax', () => {
  const sampler = new Sampler({ vocabSize: V, eosTokenIds: [0] });
  const state = (p: Parameters<typeof defaultSamplingParams>[0]) => sampler.newSequenceState(defaultSamplingParams(p), [1]);
  assert.equal(isGreedyVerifiable(state({ temperature: 0 }), [0]), true);
  assert.equal(isGreedyVerifiable(state({ temperature: 0.7 }), [0]), false);
  assert.equal(isGreedyVerifiable(state({ temperature: 0, logprobs: 1 }), [0]), false);
  assert.equal(isGreedyVerifiable(state({ temperature: 0, repetitionPenalty: 1.2 }), [0]), false);
});
