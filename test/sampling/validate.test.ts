import { test } from 'node:test';
import assert from 'node:assert/strict';
import { defaultSamplingParams } from '../../src/sampling/params.js';
import { SamplingParamError, validateSamplingParams, type RawSamplingParams } from '../../src/sampling/validate.js';

const limits = { vocabSize: 100, maxLogprobs: 20, maxStopStrings: 4 };

function errorOf(raw: RawSamplingParams): SamplingParamError {
  try {
    validateSamplingParams(raw, limits);
  } catch (err) {
    assert.ok(err instanceof SamplingParamError);
    return err;
  }
  assert.fail(`accepted ${JSON.stringify(raw)}`);
}

test('an empty request gets the defaults', () => {
  assert.deepEqual(validateSamplingParams({}, limits), defaultSamplingParams());
});

test('valid edge values are accepted and carried over', () => {
  const p = validateSamplingParams(
    {
      temperature: 0, topP: 1, topK: 0, minP: 1, repetitionPenalty: 0.01, presencePenalty: -2, frequencyPenalty: 2,
      maxTokens: 3, minTokens: 3, logprobs: 20, promptLogprobs: 0, seed: -7, stop: 'END', allowedTokenIds: [0, 99, 0],
      badWords: [[5], [6, 7]], stopTokenIds: [0, 99], logitBias: { 0: -100, 99: 100 },
      ignoreEos: true, includeStopStrInOutput: true, skipSpecialTokens: false, speculativeDecoding: false,
    },
    limits,
  );
  assert.deepEqual(p, {
    temperature: 0, topP: 1, topK: 0, minP: 1, repetitionPenalty: 0.01, presencePenalty: -2, frequencyPenalty: 2,
    maxTokens: 3, minTokens: 3, logprobs: 20, promptLogprobs: 0, seed: -7, stop: ['END'], allowedTokenIds: [0, 99],
    badWords: [[5], [6, 7]], stopTokenIds: [0, 99], logitBias: { 0: -100, 99: 100 },
    ignoreEos: true, includeStopStrInOutput: true, skipSpecialTokens: false, speculativeDecoding: false, structuredOutput: null,
  });
  assert.equal(validateSamplingParams({ temperature: 5, topK: -1 }, limits).temperature, 5);
});

test('each out-of-range field is named in the error', () => {
  const cases: [RawSamplingParams, string, RegExp][] = [
    [{ temperature: -0.1 }, 'temperature', /non-negative, got -0.1/],
    [{ topP: 0 }, 'top_p', /\(0, 1\], got 0/],
    [{ topP: 1.5 }, 'top_p', /got 1.5/],
    [{ topK: -2 }, 'top_k', /got -2/],
    [{ topK: 2.5 }, 'top_k', /integer/],
    [{ minP: 1.1 }, 'min_p', /\[0, 1\]/],
    [{ minP: -0.1 }, 'min_p', /\[0, 1\]/],
    [{ repetitionPenalty: 0 }, 'repetition_penalty', /greater than zero/],
    [{ presencePenalty: 2.5 }, 'presence_penalty', /\[-2, 2\]/],
    [{ frequencyPenalty: -3 }, 'frequency_penalty', /\[-2, 2\]/],
    [{ maxTokens: 0 }, 'max_tokens', /at least 1/],
    [{ minTokens: -1 }, 'min_tokens', /greater than or equal to 0/],
    [{ minTokens: 5, maxTokens: 4 }, 'min_tokens', /max_tokens=4/],
    [{ logprobs: -1 }, 'logprobs', /non-negative/],
    [{ logprobs: 21 }, 'logprobs', /max allowed: 20/],
    [{ promptLogprobs: -1 }, 'prompt_logprobs', /non-negative/],
    [{ allowedTokenIds: [] }, 'allowed_token_ids', /not be empty/],
    [{ allowedTokenIds: [3, 100] }, 'allowed_token_ids', /invalid: 100/],
    [{ allowedTokenIds: 3 }, 'allowed_token_ids', /list of token ids/],
    [{ badWords: [[]] }, 'bad_words', /non-empty token id sequences/],
    [{ badWords: [[1, 100]] }, 'bad_words', /in \[0, 100\)/],
    [{ promptLogprobs: 21 }, 'prompt_logprobs', /prompt_logprobs of 21, which is greater than max allowed: 20/],
    [{ seed: 1.5 }, 'seed', /integer/],
    [{ seed: 'x' }, 'seed', /number/],
    [{ stop: ['a', 'b', 'c', 'd', 'e'] }, 'stop', /at most 4/],
    [{ stop: [''] }, 'stop', /empty/],
    [{ stop: [3] }, 'stop', /string/],
    [{ stopTokenIds: [1, 2.5, 'x', 100] }, 'stop_token_ids', /2.5, "x", 100/],
    [{ temperature: 'hot' }, 'temperature', /number, got "hot"/],
    [{ ignoreEos: 'yes' }, 'ignore_eos', /boolean/],
    [{ speculativeDecoding: 'no' }, 'speculative_decoding', /speculative_decoding must be a boolean/],
  ];
  for (const [raw, param, message] of cases) {
    const err = errorOf(raw);
    assert.equal(err.param, param, JSON.stringify(raw));
    assert.match(err.message, message);
  }
});

test('logit_bias lists every bad key in one message, then bad values', () => {
  const err = errorOf({ logitBias: { 5: 1, abc: 2, '-1': 1, 100: 3, '1.5': 0 } });
  assert.equal(err.param, 'logit_bias');
  for (const key of ['"abc"', '"-1"', '"100"', '"1.5"']) assert.ok(err.message.includes(key), err.message);
  assert.ok(!err.message.includes('"5"'));
  const values = errorOf({ logitBias: { 5: 101, 6: -100.5, 7: 'x', 8: 0 } });
  assert.match(values.message, /5: 101, 6: -100.5, 7: "x"/);
  assert.equal(errorOf({ logitBias: [1, 2] }).param, 'logit_bias');
});
