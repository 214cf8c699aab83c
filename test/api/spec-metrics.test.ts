// vLLM's speculative-decoding metrics on /metrics: counters read from the engine's stats at scrape time, under
// quire: and vLLM's vllm: names, registered only when speculation is on (as vLLM's).

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ApiMetrics } from '../../src/api/metrics.js';
import type { EngineClient } from '../../src/engine/client.js';
import { emptyStats } from '../../src/engine/stats.js';

test('spec_decode counters: drafts, draft tokens, accepted tokens and accepted tokens per position', async () => {
  const s = { ...emptyStats(), specDecoding: { numDrafts: 0, numDraftTokens: 0, numAcceptedTokens: 0, numAcceptedTokensPerPos: [0, 0, 0] } };
  const metrics = new ApiMetrics({ stats: () => s } as unknown as EngineClient, 'both', 'demo');
  s.specDecoding = { numDrafts: 10, numDraftTokens: 30, numAcceptedTokens: 12, numAcceptedTokensPerPos: [7, 4, 1] };
  const text = await metrics.text();
  for (const line of ['quire:spec_decode_num_drafts_total 10', 'quire:spec_decode_num_draft_tokens_total 30',
    'quire:spec_decode_num_accepted_tokens_total 12', 'quire:spec_decode_num_accepted_tokens_per_pos_total{position="0"} 7',
    'quire:spec_decode_num_accepted_tokens_per_pos_total{position="2"} 1',
    'vllm:spec_decode_num_drafts_total{model_name="demo"} 10',
    'vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name="demo",position="1"} 4']) {
    assert.ok(text.includes(line), `missing: ${line}`);
  }
  s.specDecoding = { numDrafts: 11, numDraftTokens: 33, numAcceptedTokens: 14, numAcceptedTokensPerPos: [8, 5, 1] };
  assert.ok((await metrics.text()).includes('quire:spec_decode_num_accepted_tokens_per_pos_total{position="1"} 5'));
  const off = await new ApiMetrics({ stats: () => emptyStats() } as unknown as EngineClient).text();
  assert.ok(!off.includes('spec_decode'), 'no spec_decode metrics when speculation is off');
});

test('an engine still loading when the server started: the spec_decode counters appear at the first scrape after it is up', async () => {
  let s = emptyStats();
  const metrics = new ApiMetrics({ stats: () => s } as unknown as EngineClient, 'quire');
  assert.ok(!(await metrics.text()).includes('spec_decode'));
  s = { ...emptyStats(), specDecoding: { numDrafts: 2, numDraftTokens: 4, numAcceptedTokens: 3, numAcceptedTokensPerPos: [2, 1] } };
  assert.ok((await metrics.text()).includes('quire:spec_decode_num_accepted_tokens_total 3'));
});
