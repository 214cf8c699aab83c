import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdirSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
import { benchServe } from '../../src/lab/bench-serve.js';
import { buildW3 } from '../../src/lab/workloads.js';
import { writeReport } from '../../src/lab/report.js';
import { startMockServer } from './mock-openai.js';
import { launchChromium, noChromium } from './chromium.js';


test('the HTML report opens offline in chromium with a line and points per target', { skip: noChromium }, async () => {
  const a = await startMockServer({ prefillDelayMs: 4, tokenDelayMs: 2 });
  const b = await startMockServer({ prefillDelayMs: 1, tokenDelayMs: 1 });
  let result;
  try {
    result = await benchServe({
      targets: [
        { name: 'vllm', url: a.url, model: 'm' },
        { name: 'quire', url: b.url, model: 'm' },
      ],
      workload: buildW3({ concurrencies: [1, 2, 4], promptTokens: 8, outputTokens: 4, requestsPerConcurrency: 1, minRequests: 2 }),
      numRounds: 1,
      progress: false,
    });
  } finally {
    await a.close();
    await b.close();
  }
  mkdirSync('out', { recursive: true });
  const { htmlPath } = writeReport(
    { bench: result, gates: { pre: [{ name: 'transcript cpu-f32', kind: 'transcript', passed: true, detail: 'md5 00' }], post: [] } },
    'out/lab',
    'report-browser',
  );
  const browser = await launchChromium();
  try {
    const page = await browser.newPage({ viewport: { width: 1200, height: 1000 } });
    const requested: string[] = [];
    page.on('request', (r) => requested.push(r.url()));
    await page.goto(pathToFileURL(htmlPath).href);
    assert.deepEqual(requested.filter((u) => !u.startsWith('file:')), [], 'the report fetches nothing');
    assert.equal(await page.locator('svg.plot').count(), 4 + 3, 'four metrics and three ratio charts');
    const plotBox = await page.locator('#plot-ttft').boundingBox();
    assert.ok(plotBox && plotBox.width > 500, `a chart is ${plotBox?.width} px wide: half the page's width, not a fixed 520`);
    for (const target of ['vllm', 'quire']) {
      const line = page.locator(`#plot-output-throughput path.series[data-series="${target}"]`);
      assert.equal(await line.count(), 1);
      assert.match((await line.getAttribute('d')) ?? '', /^M[\d.]+,[\d.]+ L[\d.]+,[\d.]+ L[\d.]+,[\d.]+$/);
      assert.equal(await page.locator(`#plot-ttft circle.point[data-series="${target} p50"]`).count(), 3);
      const box = await page.locator(`#plot-ttft circle.point[data-series="${target} p99"]`).first().boundingBox();
      assert.ok(box && box.width > 0, 'points are rendered');
    }
    assert.equal(await page.locator('table.results tbody tr').count(), 6);
    assert.match((await page.locator('table.gate-summary').textContent()) ?? '', /PASS md5 00/);
    await page.screenshot({ path: 'out/lab/report-browser.png', fullPage: true });
    assert.ok(existsSync('out/lab/report-browser.png'));
  } finally {
    await browser.close();
  }
});
