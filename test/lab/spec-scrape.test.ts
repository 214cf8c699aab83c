// quire bench serve's speculative-decoding columns: the counters parsed from vLLM's and Quire's /metrics text (summed
// over label sets, the per-position and _created series left out), scraped over HTTP, and their deltas per run summed
// into each level's mean acceptance length in the report.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { benchServe } from '../../src/lab/bench-serve.js';
import { reportMarkdown } from '../../src/lab/report.js';
import { meanAcceptanceLength, metricsUrl, parseSpecCounters, scrapeSpecCounters, type SpecCounts } from '../../src/lab/spec-scrape.js';
import { buildW3 } from '../../src/lab/workloads.js';
import { startMockServer } from './mock-openai.js';

const VLLM_TEXT = `# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 10.0
vllm:spec_decode_num_drafts_total{engine="1",model_name="m"} 5.0
vllm:spec_decode_num_drafts_created{engine="0",model_name="m"} 1.7e+09
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 45.0
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 30.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} 14.0
vllm:num_requests_running{engine="0",model_name="m"} 3.0
`;

test('the counters parse from vLLM\'s text and Quire\'s, summed over engines; none without a drafts counter', () => {
  assert.deepEqual(parseSpecCounters(VLLM_TEXT), { numDrafts: 15, numDraftTokens: 45, numAcceptedTokens: 30 });
  assert.deepEqual(parseSpecCounters('quire:spec_decode_num_drafts_total 4\nquire:spec_decode_num_draft_tokens_total 12\n'
    + 'quire:spec_decode_num_accepted_tokens_total 9\n'), { numDrafts: 4, numDraftTokens: 12, numAcceptedTokens: 9 });
  assert.equal(parseSpecCounters('vllm:num_requests_running 1\n'), null);
  assert.equal(meanAcceptanceLength({ numDrafts: 4, numDraftTokens: 12, numAcceptedTokens: 9 }), 3.25);
  assert.equal(meanAcceptanceLength({ numDrafts: 0, numDraftTokens: 0, numAcceptedTokens: 0 }), null);
  for (const url of ['http://h:1', 'http://h:1/', 'http://h:1/v1', 'http://h:1/v1/completions']) assert.equal(metricsUrl(url), 'http://h:1/metrics');
});

test('a server\'s /metrics is scraped over HTTP; an unreachable one gives none', async () => {
  const server = createServer((req, res) => {
    res.writeHead(req.url === '/metrics' ? 200 : 404, { 'content-type': 'text/plain' });
    res.end(req.url === '/metrics' ? VLLM_TEXT : '');
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  try {
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`;
    assert.deepEqual(await scrapeSpecCounters(url), { numDrafts: 15, numDraftTokens: 45, numAcceptedTokens: 30 });
  } finally {
    server.close();
  }
  assert.equal(await scrapeSpecCounters('http://127.0.0.1:9/v1', 500), null);
});

test('bench serve: each run\'s counters are the difference around it; a level sums its runs into the report', async () => {
  const mock = await startMockServer({ prefillDelayMs: 1, tokenDelayMs: 1 });
  try {
    // each scrape: 2 more drafts of 3 tokens, 5 accepted, than the one before
    let n = 0;
    const scrapeSpec = (): Promise<SpecCounts> => {
      n++;
      return Promise.resolve({ numDrafts: 2 * n, numDraftTokens: 6 * n, numAcceptedTokens: 5 * n });
    };
    const workload = buildW3({ concurrencies: [1], promptTokens: 16, outputTokens: 4, requestsPerConcurrency: 2, minRequests: 2 });
    const result = await benchServe({ targets: [{ name: 'spec', url: mock.url, model: 'm' }], workload, numRounds: 2,
      numWarmupRequests: 0, progress: false, scrapeSpec });
    assert.deepEqual(result.summaries[0]!.metrics.specDecoding, { numDrafts: 4, numDraftTokens: 12, numAcceptedTokens: 10 });
    assert.deepEqual(result.runs.map((r) => r.metrics.specDecoding), Array(2).fill({ numDrafts: 2, numDraftTokens: 6, numAcceptedTokens: 5 }));
    assert.match(reportMarkdown({ bench: result }), /\| 3\.50 \(10\/12\) \|/);
    const without = await benchServe({ targets: [{ name: 'plain', url: mock.url, model: 'm' }], workload, numRounds: 1,
      numWarmupRequests: 0, progress: false });
    assert.equal(without.summaries[0]!.metrics.specDecoding, null);
  } finally {
    await mock.close();
  }
});
