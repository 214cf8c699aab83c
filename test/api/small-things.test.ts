// Issue 38's smaller things: vLLM's metric names beside ours, the Responses API refusing fields it would drop,
// no MaxListenersExceededWarning for many choices, xgrammar's log lines without its build machine's paths.

import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { postJson, scrapeMetrics, startTestServer, type TestServer } from './helpers/start.js';
import { asVllmMetrics } from '../../src/api/metrics.js';
import { xgrammarLogLine } from '../../src/sampling/structured-output.js';

describe('metric names', () => {
  let both: TestServer;
  let quireOnly: TestServer;
  before(async () => {
    both = await startTestServer();
    quireOnly = await startTestServer({ metricsNames: 'quire' });
  });
  after(async () => {
    await both.close();
    await quireOnly.close();
  });

  it('offers vLLM\'s names with model_name beside quire: ones by default', async () => {
    assert.equal((await postJson(`${both.url}/v1/completions`, { prompt: 'hi', max_tokens: 2 })).status, 200);
    const text = await scrapeMetrics(both.url);
    assert.match(text, /^quire:num_requests_running \d/m);
    assert.match(text, /^vllm:num_requests_running\{model_name="fake-model"\} \d/m);
    assert.match(text, /^vllm:request_success_total\{model_name="fake-model",finished_reason="length"\} 1$/m);
    assert.match(text, /^# TYPE vllm:time_to_first_token_seconds histogram$/m);
    assert.doesNotMatch(await scrapeMetrics(quireOnly.url), /vllm:/);
  });

  it('renames samples with and without labels', () => {
    assert.equal(asVllmMetrics('# HELP quire:a x\nquire:a 1\nquire:b_bucket{le="1"} 2\n', 'm'),
      '# HELP vllm:a x\nvllm:a{model_name="m"} 1\nvllm:b_bucket{model_name="m",le="1"} 2\n');
  });
});

describe('the Responses API and many choices', () => {
  let s: TestServer;
  before(async () => (s = await startTestServer()));
  after(() => s.close());

  for (const [field, value] of [['logit_bias', { 5: 1 }], ['stop_token_ids', [5]], ['n', 2], ['stream_options', { include_usage: true }]] as const) {
    it(`/v1/responses refuses \`${field}\` instead of ignoring it`, async () => {
      const r = await postJson(`${s.url}/v1/responses`, { input: 'hi', max_output_tokens: 2, [field]: value });
      assert.equal(r.status, 400);
      assert.equal(r.json.error.param, field);
    });
  }

  it('serves n = 16 choices without a MaxListenersExceededWarning', async () => {
    const warnings: string[] = [];
    const onWarning = (w: Error) => warnings.push(w.name);
    process.on('warning', onWarning);
    try {
      const r = await postJson(`${s.url}/v1/completions`, { prompt: 'hi', max_tokens: 2, n: 16 });
      assert.equal(r.status, 200);
      await new Promise((res) => setImmediate(res));
    } finally {
      process.off('warning', onWarning);
    }
    assert.deepEqual(warnings.filter((w) => w === 'MaxListenersExceededWarning'), []);
  });
});

describe('xgrammar log lines', () => {
  it('lose the build machine\'s source paths and stay short', () => {
    const line = xgrammarLogLine('[12:00:00] /workspace/build/xgrammar/cpp/json_schema_converter.cc:512: Warning: something odd');
    assert.equal(line, 'xgrammar: [12:00:00] Warning: something odd');
    assert.ok(xgrammarLogLine('x'.repeat(10_000)).length < 250);
  });
});
