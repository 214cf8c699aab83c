// The LLM class takes vLLM's SamplingParams and LLM(...) names (max_tokens, max_model_len) or camelCase, refuses
// any other key, and loads the bundled demo model when given none.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { basename } from 'node:path';
import { LLM } from '../../src/engine/llm.js';
import { snakeCase, toEngineOptions, toRawSamplingParams } from '../../src/engine/llm-params.js';
import { SamplingParamError } from '../../src/sampling/validate.js';

test('sampling parameters: snake_case and camelCase map to the same fields; unknown keys are refused', () => {
  assert.deepEqual(toRawSamplingParams({ max_tokens: 40, top_p: 0.9, stop_token_ids: [3], ignore_eos: true }),
    { maxTokens: 40, topP: 0.9, stopTokenIds: [3], ignoreEos: true });
  assert.deepEqual(toRawSamplingParams({ maxTokens: 40, include_stop_str_in_output: true }),
    { maxTokens: 40, includeStopStrInOutput: true });
  assert.throws(() => toRawSamplingParams({ max_token: 40 } as never),
    (e: unknown) => e instanceof SamplingParamError && /unknown sampling parameter max_token; the LLM class takes max_tokens, temperature, top_p/.test(e.message));
  assert.throws(() => toRawSamplingParams({ n: 2 } as never), /sampling parameter n \(vLLM's\) is not supported by Quire's LLM class/);
  assert.throws(() => toRawSamplingParams({ structuredOutput: {} } as never), /unknown sampling parameter structuredOutput/);
  assert.throws(() => toRawSamplingParams({ max_tokens: 4, maxTokens: 8 }), /max_tokens and maxTokens are the same parameter/);
  assert.equal(snakeCase('promptLogprobs'), 'prompt_logprobs');
});

test('engine options: vLLM\'s LLM(...) names or camelCase; unknown keys are refused', () => {
  assert.deepEqual(toEngineOptions({ max_model_len: 256, gpu_memory_utilization: 0.5, enforceEager: true }),
    { maxModelLen: 256, gpuMemoryUtilization: 0.5, enforceEager: true });
  assert.throws(() => toEngineOptions({ max_len: 256 } as never), /unknown engine option max_len; the engine takes backend, block_size/);
});

test('new LLM() with vLLM-style options serves the demo model and honours max_tokens', async () => {
  const llm = new LLM({ backend: 'cpu', cpu_threads: 1, max_model_len: 256 });
  try {
    assert.equal(basename((await llm.ready()).dir), 'quire-demo');
    assert.equal(llm.engineInfo().maxModelLen, 256);
    const [snake] = await llm.generate('In the beginning', { max_tokens: 40, temperature: 0, ignore_eos: true });
    assert.equal(snake!.tokenIds.length, 40, 'max_tokens: 40 gives 40 tokens, not the default 16');
    const [camel] = await llm.generate('In the beginning', { maxTokens: 40, temperature: 0, ignoreEos: true });
    assert.deepEqual(camel!.tokenIds, snake!.tokenIds);
    await assert.rejects(llm.generate('x', { max_tokenz: 3 } as never), /unknown sampling parameter max_tokenz/);
  } finally {
    await llm.close();
  }
});
