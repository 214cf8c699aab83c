import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { formatReport, runLoadTest } from '../../src/lab/load-test.js';
import { startTestServer, type TestServer } from '../api/helpers/start.js';

describe('load test', () => {
  let s: TestServer;
  before(async () => (s = await startTestServer({ apiKey: 'k' }, { tokenDelayMs: 2, maxRunning: 16 })));
  after(() => s.close());

  it('runs concurrent streaming clients and reports latency and the server RSS', async () => {
    const r = await runLoadTest({ url: s.url, numClients: 60, maxTokens: 5, apiKey: 'k', pid: process.pid });
    assert.equal(r.numOk, 60);
    assert.equal(r.numErrors, 0);
    assert.equal(r.numChunks, 60 * 5);
    assert.ok(r.ttftMs.p50 > 0 && r.ttftMs.p50 <= r.ttftMs.p99 && r.ttftMs.p99 <= r.ttftMs.max);
    assert.ok(r.e2eMs.p50 >= r.ttftMs.p50);
    assert.ok(r.rssBytesPeak! >= r.rssBytesStart! && r.rssBytesStart! > 0);
    assert.match(formatReport(r), /60 ok, 0 errors/);
  });

  it('counts errors by kind', async () => {
    const r = await runLoadTest({ url: s.url, numClients: 5, maxTokens: 2 });
    assert.equal(r.numErrors, 5);
    assert.deepEqual(r.errors, { 'HTTP 401': 5 });
  });
});
