import { test } from 'node:test';
import assert from 'node:assert/strict';
import { defaultSamplingParams, type SamplingParams } from '../../src/sampling/params.js';
import { Sampler } from '../../src/sampling/sampler.js';
import { applyPenalties, SequenceSamplingState } from '../../src/sampling/sequence-state.js';
import { Rng } from '../../src/backend/sampling/rng.js';

const EOS = 0;

function sampler(vocabSize: number, seed = 1): Sampler {
  return new Sampler({ vocabSize, eosTokenIds: [EOS], seed });
}

function params(overrides: Partial<SamplingParams>): SamplingParams {
  return defaultSamplingParams(overrides);
}

/** Draws n tokens from one row (state not advanced, so penalties stay fixed). */
function histogram(logits: number[], p: Partial<SamplingParams>, n: number, seed = 11): number[] {
  const s = sampler(logits.length);
  const state = s.newSequenceState(params({ seed, ...p }), [5]);
  const row = Float32Array.from(logits);
  const counts = new Array<number>(logits.length).fill(0);
  for (let i = 0; i < n; i++) counts[s.sample(row, [state]).tokenIds[0]!]!++;
  return counts;
}

function softmax(logits: number[]): number[] {
  const max = Math.max(...logits);
  const e = logits.map((l) => Math.exp(l - max));
  const z = e.reduce((a, b) => a + b, 0);
  return e.map((x) => x / z);
}

function support(counts: number[]): number[] {
  return counts.flatMap((c, i) => (c > 0 ? [i] : []));
}

test('greedy takes the argmax of each row, ties to the lowest id', () => {
  const s = sampler(4);
  const greedy = params({ temperature: 0 });
  const rows = [s.newSequenceState(greedy, [1]), s.newSequenceState(greedy, [1])];
  const out = s.sample(Float32Array.from([0.1, 3, 2, 3, /* row 2 */ 5, -1, 5, 0]), rows);
  assert.deepEqual([...out.tokenIds], [1, 0]);
});

test('draws follow softmax(logits / temperature)', () => {
  const logits = [0.3, 1.1, -0.4, 0.9, 0];
  const n = 40_000;
  for (const temperature of [1, 0.5, 2]) {
    const counts = histogram(logits, { temperature }, n);
    const expected = softmax(logits.map((l) => l / temperature));
    counts.forEach((c, i) => assert.ok(Math.abs(c / n - expected[i]!) < 0.015, `T=${temperature} id ${i}: ${c / n} vs ${expected[i]}`));
  }
});

test('top-k keeps exactly the k largest (ties at the k-th kept)', () => {
  const logits = [0.5, 2, 1.5, -1, 1, 1.8, 0];
  assert.deepEqual(support(histogram(logits, { topK: 3 }, 3000)), [1, 2, 5]);
  assert.deepEqual(support(histogram([1, 2, 1, 0, 1], { topK: 2 }, 3000)), [0, 1, 2, 4]);
  assert.equal(support(histogram(logits, { topK: 0 }, 3000)).length, logits.length);
});

test('top-p keeps the smallest best-first prefix whose mass reaches p', () => {
  const logits = [0.5, 0.3, 0.15, 0.05].map(Math.log);
  assert.deepEqual(support(histogram(logits, { topP: 0.75 }, 3000)), [0, 1]);
  assert.deepEqual(support(histogram(logits, { topP: 0.85 }, 3000)), [0, 1, 2]);
  assert.deepEqual(support(histogram(logits, { topP: 0.4 }, 500)), [0]);
  const counts = histogram(logits, { topP: 0.85 }, 30_000);
  const kept = 0.95;
  [0.5, 0.3, 0.15].forEach((p, i) => assert.ok(Math.abs(counts[i]! / 30_000 - p / kept) < 0.015));
});

test('top-p past the first partial selection (many near-equal candidates)', () => {
  const vocab = 3000;
  const logits = Array.from({ length: vocab }, (_, i) => -i * 1e-4);
  const probs = softmax(logits);
  const p = 0.5;
  let numKept = 0;
  for (let mass = 0; mass < p; numKept++) mass += probs[numKept]!;
  const drawn = support(histogram(logits, { topP: p }, 20_000));
  assert.ok(drawn[drawn.length - 1]! < numKept, `drew ${drawn[drawn.length - 1]} but only ${numKept} are kept`);
  assert.ok(drawn[drawn.length - 1]! > numKept - 20 && numKept > 1000);
});

test('min-p drops tokens below minP times the top probability', () => {
  const logits = [1, 0.5, 0.25, 0.1, 0.19].map(Math.log);
  assert.deepEqual(support(histogram(logits, { minP: 0.2 }, 4000)), [0, 1, 2]);
  assert.deepEqual(support(histogram(logits, { minP: 0.6 }, 1000)), [0]);
});

test('penalties change exactly the penalised logits by the right amounts', () => {
  const vocab = 8;
  const row = Float32Array.from([1.5, -2, 3, 0.5, -1, 2, 4, -0.5]);
  const state = new SequenceSamplingState(
    params({ repetitionPenalty: 2, frequencyPenalty: 0.5, presencePenalty: 0.25 }),
    [0, 1, 1],
    new Rng(0),
  );
  state.appendOutputTokens([1, 3, 3, 3]);
  const out = Float32Array.from(row);
  applyPenalties(out, vocab, state);
  const expected = Float32Array.from(row);
  expected[0] = row[0]! / 2; // prompt only
  expected[1] = Math.fround(row[1]! * 2) - 0.5 * 1 - 0.25; // prompt and output once
  expected[3] = Math.fround(row[3]! / 2) - 0.5 * 3 - 0.25; // output three times
  assert.deepEqual(out, expected);
});

test('penalty counts are incremental and can be rolled back', () => {
  const state = new SequenceSamplingState(params({ frequencyPenalty: 1 }), [0], new Rng(0));
  state.appendOutputTokens([4, 4]);
  state.appendOutputTokens([5]);
  assert.equal(state.numOutputTokens, 3);
  assert.deepEqual([...state.outputTokenCounts], [[4, 2], [5, 1]]);
  state.removeOutputTokens([5, 4]);
  assert.deepEqual([...state.outputTokenCounts], [[4, 1]]);
  assert.throws(() => state.removeOutputTokens([9]));
});

test('repetition penalty moves greedy off a repeated token', () => {
  const s = sampler(4);
  const row = Float32Array.from([0, 2, 1.5, 0]);
  const plain = s.newSequenceState(params({ temperature: 0 }), [1]);
  const penalised = s.newSequenceState(params({ temperature: 0, repetitionPenalty: 1.5 }), [1]);
  assert.deepEqual([...s.sample(Float32Array.from([...row, ...row]), [plain, penalised]).tokenIds], [1, 2]);
});

test('logit bias is added before selection', () => {
  const s = sampler(4);
  const row = Float32Array.from([0, 2, 1.5, 0.3]);
  const up = s.newSequenceState(params({ temperature: 0, logitBias: { 3: 5 } }), [1]);
  assert.equal(s.sample(row, [up]).tokenIds[0], 3);
  const banned = support(histogram([0, 2, 1.5, 0.3], { logitBias: { 1: -100, 2: -100 } }, 2000));
  assert.deepEqual(banned, [0, 3]);
});

test('min tokens masks EOS and stop tokens until enough tokens exist', () => {
  const s = sampler(4);
  const row = Float32Array.from([9, 1, 8, 2]); // EOS = 0 most likely, then stop token 2
  const state = s.newSequenceState(params({ temperature: 0, minTokens: 2, stopTokenIds: [2] }), [1]);
  assert.equal(s.sample(row, [state]).tokenIds[0], 3);
  state.appendOutputTokens([3]);
  assert.equal(s.sample(row, [state]).tokenIds[0], 3);
  state.appendOutputTokens([3]);
  assert.equal(s.sample(row, [state]).tokenIds[0], EOS);
  const ignoreEos = s.newSequenceState(params({ temperature: 0, minTokens: 2, stopTokenIds: [2], ignoreEos: true }), [1]);
  assert.equal(s.sample(row, [ignoreEos]).tokenIds[0], EOS);
  const masked = s.newSequenceState(params({ temperature: 0, minTokens: 2, stopTokenIds: [2], ignoreEos: true }), [1]);
  assert.equal(s.sample(Float32Array.from([1, 0, 8, 2]), [masked]).tokenIds[0], 3);
});

test('seeded rows are reproducible and independent of the batch around them', () => {
  const vocab = 50;
  const rng = new Rng(99);
  const row = Float32Array.from({ length: vocab }, () => rng.nextFloat() * 4);
  const run = (seed: number | null, withNeighbour: boolean, s = sampler(vocab)) => {
    const state = s.newSequenceState(params({ seed }), [1]);
    const neighbour = s.newSequenceState(params({}), [1]);
    const tokens: number[] = [];
    for (let i = 0; i < 40; i++) {
      const out = withNeighbour ? s.sample(Float32Array.from([...row, ...row]), [neighbour, state]).tokenIds[1]! : s.sample(row, [state]).tokenIds[0]!;
      tokens.push(out);
    }
    return tokens;
  };
  assert.deepEqual(run(123, false), run(123, true));
  assert.notDeepEqual(run(123, false), run(124, false));
  // Unseeded rows share the engine stream: the neighbour's draws change them.
  assert.notDeepEqual(run(null, false, sampler(vocab, 5)), run(null, true, sampler(vocab, 5)));
  assert.deepEqual(run(null, false, sampler(vocab, 5)), run(null, false, sampler(vocab, 5)));
});

test('logprobs are the raw log_softmax of the model logits, with the top-N best first', () => {
  const s = sampler(6);
  const logits = [0.2, 2.5, -1, 1.7, 0.9, 2.5];
  const state = s.newSequenceState(params({ temperature: 0, logprobs: 3, repetitionPenalty: 3, logitBias: { 4: 10 } }), [1, 5]);
  const out = s.sample(Float32Array.from(logits), [state]);
  const raw = softmax(logits).map(Math.log);
  const lp = out.logprobs[0]!;
  assert.equal(lp.tokenId, 4);
  assert.ok(Math.abs(lp.logprob - raw[4]!) < 1e-6);
  assert.deepEqual(lp.top.map((t) => t.tokenId), [1, 5, 3]);
  lp.top.forEach((t) => assert.ok(Math.abs(t.logprob - raw[t.tokenId]!) < 1e-6));
  const none = s.sample(Float32Array.from(logits), [s.newSequenceState(params({}), [1])]);
  assert.equal(none.logprobs[0], null);
  const zero = s.sample(Float32Array.from(logits), [s.newSequenceState(params({ logprobs: 0 }), [1])]);
  assert.deepEqual(zero.logprobs[0]!.top, []);
});

test('the caller logits are left untouched and short buffers are refused', () => {
  const s = sampler(3);
  const logits = Float32Array.from([1, 2, 3]);
  s.sample(logits, [s.newSequenceState(params({ temperature: 0.5, repetitionPenalty: 2, logitBias: { 0: 1 } }), [2])]);
  assert.deepEqual([...logits], [1, 2, 3]);
  assert.throws(() => s.sample(logits, [s.newSequenceState(params({}), [1]), s.newSequenceState(params({}), [1])]), RangeError);
});

test('allowed_token_ids: only those ids are ever sampled, greedy or not; raw logprobs are the model\'s', () => {
  const logits = [0, 3, 1, 2.5, 0.5, 2];
  const greedy = histogram(logits, { temperature: 0, allowedTokenIds: [2, 4] }, 1);
  assert.deepEqual(support(greedy), [2]);
  const drawn = histogram(logits, { temperature: 1, allowedTokenIds: [3, 4, 5] }, 3000);
  assert.deepEqual(support(drawn), [3, 4, 5]);
  const s = sampler(logits.length);
  const out = s.sample(Float32Array.from(logits), [s.newSequenceState(params({ temperature: 0, allowedTokenIds: [2], logprobs: 1 }), [5])]);
  assert.equal(out.tokenIds[0], 2);
  assert.equal(out.logprobs[0]!.top[0]!.tokenId, 1, 'top logprobs before the mask');
});

test('bad_words: a one-token word is never sampled; a longer word\'s last token only after the rest of it', () => {
  const s = sampler(6);
  const row = Float32Array.from([0, 5, 4, 3, 2, 1]);
  const state = s.newSequenceState(params({ temperature: 0, badWords: [[1], [2, 3, 2]] }), [4]);
  const next = () => s.sample(row, [state]).tokenIds[0]!;
  assert.equal(next(), 2, '1 is banned outright');
  state.appendOutputTokens([2]);
  assert.equal(next(), 2, 'the output ends with 2, not 2 3');
  state.appendOutputTokens([3]);
  assert.equal(next(), 3, 'after 2 3, 2 would end the bad word');
  state.appendOutputTokens([4]);
  assert.equal(next(), 2);
  state.removeOutputTokens([4]);
  assert.equal(next(), 3, 'taking a token back restores the word\'s prefix');
});
