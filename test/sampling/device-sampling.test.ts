import { test } from 'node:test';
import assert from 'node:assert/strict';
import { buildRowSampling, isDeviceSamplable } from '../../src/sampling/device-sampling.js';
import { sampleRowsReference } from '../../src/backend/sampling/reference.js';
import { defaultSamplingParams, type SamplingParams } from '../../src/sampling/params.js';
import { Sampler } from '../../src/sampling/sampler.js';
import { seededRandom } from '../../src/model/random-weights.js';

const EOS = [0];

function state(sampler: Sampler, p: Partial<SamplingParams>) {
  return sampler.newSequenceState(defaultSamplingParams(p), [3, 4]);
}

test('rows needing the logits on the host are not device-samplable', () => {
  const s = new Sampler({ vocabSize: 16, eosTokenIds: EOS });
  assert.equal(isDeviceSamplable(state(s, {}), EOS), true);
  assert.equal(isDeviceSamplable(state(s, { temperature: 0, topK: 5, topP: 0.5, minP: 0.1, seed: 3 }), EOS), true);
  for (const p of [{ logprobs: 0 }, { promptLogprobs: 0 }, { allowedTokenIds: [3] }, { badWords: [[3]] }, { logitBias: { 3: 1 } }, { repetitionPenalty: 1.1 }, { frequencyPenalty: 0.5 },
    { presencePenalty: -0.5 }, { minTokens: 2 }] as Partial<SamplingParams>[]) {
    assert.equal(isDeviceSamplable(state(s, p), EOS), false, JSON.stringify(p));
  }
  // min_tokens masks nothing once reached, or when there is nothing to mask
  const reached = state(s, { minTokens: 1 });
  reached.appendOutputTokens([7]);
  assert.equal(isDeviceSamplable(reached, EOS), true);
  assert.equal(isDeviceSamplable(state(s, { minTokens: 2, ignoreEos: true }), EOS), true);
  assert.equal(isDeviceSamplable(state(s, { minTokens: 2, ignoreEos: true, stopTokenIds: [9] }), EOS), false);
});

test('buildRowSampling draws one uniform per non-greedy row and pads with greedy rows', () => {
  const s = new Sampler({ vocabSize: 16, eosTokenIds: EOS, seed: 5 });
  const greedy = state(s, { temperature: 0 });
  const hot = state(s, { temperature: 0.5, topK: 4, topP: 0.75, minP: 0.125, seed: 9 });
  const rows = buildRowSampling([greedy, hot, greedy], 5);
  assert.deepEqual([...rows.temperature], [0, 0.5, 0, 0, 0]);
  assert.deepEqual([...rows.topK], [0, 4, 0, 0, 0]);
  assert.deepEqual([...rows.topP], [1, 0.75, 1, 1, 1]);
  assert.deepEqual([...rows.minP], [0, 0.125, 0, 0, 0]);
  assert.equal(rows.uniform[0], 0);
  assert.ok(rows.uniform[1]! > 0 && rows.uniform[1]! < 1);
  const again = state(new Sampler({ vocabSize: 16, eosTokenIds: EOS }), { temperature: 0.5, seed: 9 });
  assert.equal(Math.fround(again.rng.nextFloat()), rows.uniform[1], 'the row used its own RNG, once');
  assert.equal(s.engineRng.nextFloat(), new Sampler({ vocabSize: 16, eosTokenIds: EOS, seed: 5 }).engineRng.nextFloat(),
    'greedy rows leave the engine RNG alone');
});

test('the backend reference picks what the host sampler picks for the same RNG stream', () => {
  const vocab = 300;
  const rand = seededRandom(17);
  const numRows = 24;
  const logits = new Float32Array(numRows * vocab);
  for (let i = 0; i < logits.length; i++) logits[i] = Math.fround(4 * (rand() - 0.5));
  for (let i = 0; i < 40; i++) logits[5 * vocab + i] = 1.5; // ties
  const variants: Partial<SamplingParams>[] = [
    { temperature: 0 }, { temperature: 1 }, { temperature: 0.5, topK: 7 }, { temperature: 1, topP: 0.75 },
    { temperature: 2, minP: 0.125 }, { temperature: 0.75, topK: 50, topP: 0.5, minP: 0.0625 },
  ];
  const params = Array.from({ length: numRows }, (_, r) => ({ ...variants[r % variants.length]!, seed: 100 + r }));
  for (let step = 0; step < 5; step++) {
    const host = new Sampler({ vocabSize: vocab, eosTokenIds: EOS });
    const device = new Sampler({ vocabSize: vocab, eosTokenIds: EOS });
    const hostStates = params.map((p) => host.newSequenceState(defaultSamplingParams({ ...p, seed: p.seed + step }), []));
    const deviceStates = params.map((p) => device.newSequenceState(defaultSamplingParams({ ...p, seed: p.seed + step }), []));
    const expected = host.sample(logits, hostStates).tokenIds;
    const actual = sampleRowsReference(logits, vocab, numRows, buildRowSampling(deviceStates, numRows));
    assert.deepEqual([...actual], [...expected], `step ${step}`);
  }
});

test('without row sampling every row is greedy; rows of -Infinity give token 0', () => {
  const logits = Float32Array.from([0, 2, 2, 1, -Infinity, -Infinity, -Infinity, -Infinity]);
  assert.deepEqual([...sampleRowsReference(logits, 4, 2, undefined)], [1, 0]);
});
