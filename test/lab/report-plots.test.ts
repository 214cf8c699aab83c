// The report's charts for a run of one level: a bar per target with its spread over rounds (not a chart of one dot
// per target), and the ratio charts coloured by whether the second target is better or worse.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { benchServe } from '../../src/lab/bench-serve.js';
import { buildCustomWorkload } from '../../src/lab/workloads.js';
import { reportPlots, ratioVerdict } from '../../src/lab/report.js';
import { startMockServer } from './mock-openai.js';

test('a single-level run is charted as bars with their spread, and ratios as bars against 1', async () => {
  // far apart (30 ms against 1 ms a token): a loaded machine's timers stretch a 1 ms delay, never past 30
  const slow = await startMockServer({ prefillDelayMs: 30, tokenDelayMs: 30 });
  const fast = await startMockServer({ prefillDelayMs: 1, tokenDelayMs: 1 });
  try {
    const result = await benchServe({
      targets: [{ name: 'slow', url: slow.url, model: 'm' }, { name: 'fast', url: fast.url, model: 'm' }],
      workload: buildCustomWorkload({ numRequests: 4, promptTokens: 8, outputTokens: 4, concurrency: 2 }),
      numRounds: 2, progress: false,
    });
    const plots = reportPlots(result);
    assert.equal(plots.length, 4 + 3);
    const ttft = plots.find((p) => p.includes('id="plot-ttft"'))!;
    assert.doesNotMatch(ttft, /class="series"/, 'no line through one point');
    assert.equal((ttft.match(/<rect class="bar"/g) ?? []).length, 2, 'a bar per target');
    assert.match(ttft, /<g class="spread" data-series="slow">/, 'with its spread over the two rounds');
    const tpotRatio = plots.find((p) => p.includes('id="plot-ratio-tpotP50Ms"'))!;
    assert.match(tpotRatio, /<rect class="bar better"[^>]*data-series="fast \/ slow"/, 'a lower TPOT is better');
    assert.match(tpotRatio, /class="reference"/);
  } finally {
    await slow.close();
    await fast.close();
  }
});

test('ratioVerdict: above 1 is better for rates and worse for latencies; about 1 is neither', () => {
  assert.equal(ratioVerdict('outputTokensPerS', 1.2), 'better');
  assert.equal(ratioVerdict('outputTokensPerS', 0.8), 'worse');
  assert.equal(ratioVerdict('ttftP50Ms', 1.2), 'worse');
  assert.equal(ratioVerdict('ttftP50Ms', 0.8), 'better');
  assert.equal(ratioVerdict('tpotP50Ms', 1.001), '');
  assert.equal(ratioVerdict('tpotP50Ms', NaN), '');
});
