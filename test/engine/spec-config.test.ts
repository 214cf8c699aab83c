// --speculative-config: vLLM's fields, refused by name when unknown or not yet supported; the n-gram proposer.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { parseSpeculativeConfig } from '../../src/engine/spec/config.js';
import { proposeNgram } from '../../src/engine/spec/ngram-proposer.js';

test('an ngram config parses with vLLM\'s defaults (lookup 5..5; one bound given sets the other), camelCase too', () => {
  assert.deepEqual(parseSpeculativeConfig('{"method": "ngram", "num_speculative_tokens": 3}'),
    { method: 'ngram', numSpeculativeTokens: 3, promptLookupMin: 5, promptLookupMax: 5 });
  assert.deepEqual(parseSpeculativeConfig({ method: 'ngram', num_speculative_tokens: 2, prompt_lookup_max: 4 }),
    { method: 'ngram', numSpeculativeTokens: 2, promptLookupMin: 4, promptLookupMax: 4 });
  const parsed = parseSpeculativeConfig('{"model": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 2, "prompt_lookup_max": 3}');
  assert.deepEqual(parsed, { method: 'ngram', numSpeculativeTokens: 4, promptLookupMin: 2, promptLookupMax: 3 });
  assert.deepEqual(parseSpeculativeConfig(parsed), parsed, 'a parsed config parses to itself');
  const capped = parseSpeculativeConfig('{"method": "ngram", "num_speculative_tokens": 2, "disable_by_batch_size": 8}');
  assert.equal(capped.disableByBatchSize, 8);
  assert.deepEqual(parseSpeculativeConfig(capped), capped);
  assert.throws(() => parseSpeculativeConfig('{"method": "ngram", "num_speculative_tokens": 2, "disable_by_batch_size": 0}'),
    /disable_by_batch_size must be a positive integer/);
});

test('a draft_model config parses (vLLM infers the method from a model path alone), camelCase too', () => {
  const parsed = parseSpeculativeConfig('{"method": "draft_model", "model": "/d", "num_speculative_tokens": 3, "disable_by_batch_size": 16}');
  assert.deepEqual(parsed, { method: 'draft_model', model: '/d', numSpeculativeTokens: 3, disableByBatchSize: 16 });
  assert.deepEqual(parseSpeculativeConfig(parsed), parsed, 'a parsed config parses to itself');
  // without disable_by_batch_size, a draft speculates only while one request runs (measured: DRAFT_MODEL_DISABLE_BY_BATCH_SIZE)
  assert.deepEqual(parseSpeculativeConfig({ model: '/d', num_speculative_tokens: 2 }),
    { method: 'draft_model', model: '/d', numSpeculativeTokens: 2, disableByBatchSize: 2 });
});

test('an mtp config parses (vLLM\'s older qwen3_5_mtp and qwen3_next_mtp are the same method), camelCase too', () => {
  for (const method of ['mtp', 'qwen3_5_mtp', 'qwen3_next_mtp']) {
    assert.deepEqual(parseSpeculativeConfig(`{"method": "${method}", "num_speculative_tokens": 3}`), { method: 'mtp', numSpeculativeTokens: 3 });
  }
  const parsed = parseSpeculativeConfig({ method: 'mtp', numSpeculativeTokens: 2, disableByBatchSize: 8 });
  assert.deepEqual(parsed, { method: 'mtp', numSpeculativeTokens: 2, disableByBatchSize: 8 });
  assert.deepEqual(parseSpeculativeConfig(parsed), parsed, 'a parsed config parses to itself');
});

test('an eagle3 config parses: the head\'s directory, camelCase too', () => {
  const parsed = parseSpeculativeConfig('{"method": "eagle3", "model": "/h", "num_speculative_tokens": 3}');
  assert.deepEqual(parsed, { method: 'eagle3', model: '/h', numSpeculativeTokens: 3 });
  assert.deepEqual(parseSpeculativeConfig(parsed), parsed, 'a parsed config parses to itself');
  assert.deepEqual(parseSpeculativeConfig({ method: 'eagle3', model: '/h', numSpeculativeTokens: 2, disableByBatchSize: 8 }),
    { method: 'eagle3', model: '/h', numSpeculativeTokens: 2, disableByBatchSize: 8 });
});

test('a config is refused naming the method or field at fault', () => {
  const refused: [string, RegExp][] = [
    ['{"method": "ngram", "num_speculative_tokens": 3, "draft_tensor_parallel_size": 1}', /field "draft_tensor_parallel_size"/],
    ['{"method": "lookahead", "num_speculative_tokens": 3}', /method "lookahead" is unknown/],
    ['{"method": "draft_model", "num_speculative_tokens": 3}', /model: the draft_model method needs the draft model's directory/],
    ['{"method": "draft_model", "model": "/m"}', /num_speculative_tokens is required for the draft_model method/],
    ['{"method": "draft_model", "model": "/m", "num_speculative_tokens": 3, "prompt_lookup_max": 3}', /prompt_lookup_max: only the ngram method takes it/],
    ['{"method": "eagle", "model": "/h", "num_speculative_tokens": 3}', /method "eagle" is not supported yet \(ngram, draft_model, mtp and eagle3 are/],
    ['{"method": "eagle3", "num_speculative_tokens": 3}', /model: the eagle3 method needs the EAGLE-3 head's directory/],
    ['{"method": "eagle3", "model": "/h"}', /num_speculative_tokens is required for the eagle3 method/],
    ['{"method": "eagle3", "model": "/h", "num_speculative_tokens": 3, "prompt_lookup_min": 2}', /prompt_lookup_min: only the ngram method takes it/],
    ['{"method": "mtp"}', /num_speculative_tokens is required for the mtp method/],
    ['{"method": "mtp", "model": "/m", "num_speculative_tokens": 1}', /model: the mtp method reads the head from the target's checkpoint/],
    ['{"method": "qwen3_5_mtp", "num_speculative_tokens": 1, "prompt_lookup_min": 2}', /prompt_lookup_min: only the ngram method takes it/],
    ['{"method": "deepseek_mtp", "num_speculative_tokens": 1}', /method "deepseek_mtp" is unknown/],
    ['{"method": "ngram"}', /num_speculative_tokens is required/],
    ['{"method": "ngram", "num_speculative_tokens": 0}', /num_speculative_tokens must be a positive integer/],
    ['{"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_min": 4, "prompt_lookup_max": 2}', /prompt_lookup_min \(4\) is larger/],
    ['{"num_speculative_tokens": 2}', /method is required/],
    ['[1]', /expected a JSON object/],
    ['{method', /not JSON/],
  ];
  for (const [json, why] of refused) assert.throws(() => parseSpeculativeConfig(json), why, json);
});

test('n-gram proposals: the longest recurring suffix (prompt_lookup_max down to _min), its earliest occurrence, the k tokens after it', () => {
  const o = { promptLookupMin: 1, promptLookupMax: 3 };
  // suffix [1, 2, 3] recurs at 0: propose what followed it
  assert.deepEqual(proposeNgram([1, 2, 3, 4, 5, 9, 1, 2, 3], 2, o), [4, 5]);
  // the 3-gram [7, 1, 2] does not recur; the 2-gram [1, 2] does, earliest at 0 (not at 4)
  assert.deepEqual(proposeNgram([1, 2, 8, 8, 1, 2, 6, 7, 1, 2], 3, o), [8, 8, 1]);
  // a longer match wins over an earlier shorter one
  assert.deepEqual(proposeNgram([2, 9, 5, 2, 1, 5, 2], 1, { promptLookupMin: 1, promptLookupMax: 2 }), [1]);
  // proposals stop at the end of what is known (an overlap with the suffix itself)
  assert.deepEqual(proposeNgram([3, 3, 3], 5, o), [3]);
  // nothing recurs at min length: no proposal
  assert.deepEqual(proposeNgram([1, 2, 3, 4], 3, { promptLookupMin: 2, promptLookupMax: 3 }), []);
  assert.deepEqual(proposeNgram([1, 2, 1, 2], 0, o), []);
  assert.deepEqual(proposeNgram([1], 3, { promptLookupMin: 2, promptLookupMax: 2 }), []);
});
