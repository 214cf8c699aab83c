// `bench decode --temperature/--top-p/--top-k` and runOffline's sampling options reach every request.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { LLM } from '../../src/engine/llm.js';
import { llmBatchRunner } from '../../src/lab/offline.js';
import type { RawSamplingParams } from '../../src/sampling/validate.js';

function fakeLlm(seen: RawSamplingParams[]): LLM {
  return {
    async *stream(_prompt: unknown, params: RawSamplingParams) {
      seen.push(params);
      yield { tokenIds: [7], text: '', finished: true };
    },
    stats: async () => ({}),
    engineInfo: () => ({ maxNumBatchedTokens: 16, maxNumSeqs: 4 }),
  } as unknown as LLM;
}

test('the decode runner samples as told; greedy by default', async () => {
  const seen: RawSamplingParams[] = [];
  await llmBatchRunner(fakeLlm(seen), { temperature: 0.7, topP: 0.9, topK: 50 })([[1, 2], [3]], 5);
  assert.equal(seen.length, 2);
  for (const p of seen) assert.deepEqual(p, { maxTokens: 5, ignoreEos: true, temperature: 0.7, topP: 0.9, topK: 50 });
  seen.length = 0;
  await llmBatchRunner(fakeLlm(seen))([[1]], 3);
  assert.deepEqual(seen[0], { maxTokens: 3, ignoreEos: true, temperature: 0 });
});
