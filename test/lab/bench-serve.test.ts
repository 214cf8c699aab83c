import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { benchServe, type LevelRun } from '../../src/lab/bench-serve.js';
import { buildW3, buildW5 } from '../../src/lab/workloads.js';
import { reportMarkdown, writeReport } from '../../src/lab/report.js';
import { startMockServer } from './mock-openai.js';

test('bench serve: two targets, interleaved rounds, ratios, report', async (t) => {
  // slow enough that the ratios stay far from their bounds on a loaded 2-core runner (1.42 was seen at 12 / 6 ms)
  const slow = await startMockServer({ prefillDelayMs: 30, tokenDelayMs: 15 });
  const fast = await startMockServer({ prefillDelayMs: 2, tokenDelayMs: 1 });
  try {
    const workload = buildW3({ concurrencies: [1, 4], promptTokens: 32, outputTokens: 8, requestsPerConcurrency: 2, minRequests: 4 });
    const order: string[] = [];
    const result = await benchServe({
      targets: [
        { name: 'slow', url: slow.url, model: 'm' },
        { name: 'fast', url: fast.url, model: 'm' },
      ],
      workload,
      numRounds: 2,
      numWarmupRequests: 1,
      progress: false,
      onRun: (r: LevelRun) => order.push(`${r.level}/${r.target}/${r.round}`),
    });
    assert.deepEqual(order, ['c1/slow/0', 'c1/fast/0', 'c1/slow/1', 'c1/fast/1', 'c4/slow/0', 'c4/fast/0', 'c4/slow/1', 'c4/fast/1']);
    // 1 warm-up + (4 + 8) requests x 2 rounds per target.
    assert.equal(slow.numRequests, 25);
    assert.equal(fast.numRequests, 25);
    assert.equal(slow.maxInFlight, 4);
    assert.equal(new Set(slow.prompts).size, slow.prompts.length, 'every request carries a fresh nonce');
    assert.equal(slow.bodies[1]!['ignore_eos'], true);

    assert.equal(result.summaries.length, 4);
    for (const s of result.summaries) {
      assert.equal(s.metrics.numErrors, 0, s.metrics.errors.join('; '));
      assert.equal(s.metrics.numOutputTokens, s.metrics.numRequests * 8);
      assert.equal(s.metrics.promptTokensReported, true);
      assert.equal(s.metrics.numCachedPromptTokens, null, 'the server did not report cached tokens');
      assert.equal(s.metrics.numPromptTokens, s.metrics.numRequests * 32, '32 words, the nonce in place of the first 4, as the server counted them');
      assert.ok(s.metrics.ttftMs.p50 <= s.metrics.ttftMs.p99);
    }
    const c1 = (t: string) => result.summaries.find((s) => s.level === 'c1' && s.target === t)!.metrics;
    assert.ok(c1('slow').tpotMs.p50 >= 5, `slow tpot ${c1('slow').tpotMs.p50}`);
    assert.ok(c1('fast').tpotMs.p50 < c1('slow').tpotMs.p50);
    assert.ok(c1('slow').ttftMs.p50 >= 11);

    assert.equal(result.ratios.length, 2);
    for (const r of result.ratios) {
      assert.equal(r.baseline, 'slow');
      assert.equal(r.target, 'fast');
      assert.equal(r.metrics.outputTokensPerS.perRound.length, 2);
      assert.ok(r.metrics.outputTokensPerS.median > 1.5, `throughput ratio ${r.metrics.outputTokensPerS.median}`);
      assert.ok(r.metrics.tpotP50Ms.median < 0.7, `tpot ratio ${r.metrics.tpotP50Ms.median}`);
      assert.ok(r.metrics.outputTokensPerS.min <= r.metrics.outputTokensPerS.median);
    }

    const dir = mkdtempSync(join(tmpdir(), 'quire-lab-'));
    t.after(() => rmSync(dir, { recursive: true, force: true }));
    const paths = writeReport({ bench: result, title: 'mock A/B' }, dir);
    const json = JSON.parse(readFileSync(paths.jsonPath, 'utf8')) as { bench: { targets: { name: string }[] } };
    assert.deepEqual(json.bench.targets.map((t) => t.name), ['slow', 'fast']);
    const md = readFileSync(paths.markdownPath, 'utf8');
    assert.match(md, /\| c4 \| fast \/ slow \| \d+\.\d{3}x/);
    const html = readFileSync(paths.htmlPath, 'utf8');
    assert.equal((html.match(/<svg /g) ?? []).length, 4 + 3, 'four metrics, three ratio charts');
    assert.match(html, /<svg [^>]*width="100%"/, 'charts take the width of the page');
    assert.match(html, /<g class="spread" data-series="fast p50">/, 'the spread over rounds is on the plots');
    assert.match(html, /id="plot-ratio-outputTokensPerS"[^]*?<rect class="bar better"[^>]*data-series="c1: fast"/,
      'the faster target\'s throughput ratio is a bar coloured better');
    assert.match(html, /id="plot-ratio-tpotP50Ms"[^]*?<rect class="bar better"/, 'a lower TPOT ratio is better too');
    assert.match(html, /<td class="better">\d/);
    assert.match(html, /data-series="fast p50"/);
    assert.match(html, /data-series="slow p99"/);
  } finally {
    await slow.close();
    await fast.close();
  }
});

test('bench serve: a bursty request rate level and a failing target are reported, not thrown', async () => {
  const ok = await startMockServer({ prefillDelayMs: 1, tokenDelayMs: 1 });
  try {
    const workload = buildW3({ concurrencies: [2], promptTokens: 8, outputTokens: 3, requestsPerConcurrency: 2, minRequests: 4 });
    workload.levels[0]!.requestRatePerS = 200;
    workload.levels[0]!.burstiness = 0.5;
    const result = await benchServe({
      targets: [
        { name: 'ok', url: ok.url, model: 'm' },
        { name: 'down', url: 'http://127.0.0.1:9/', model: 'm' },
      ],
      workload,
      numRounds: 1,
      progress: false,
    });
    const down = result.summaries.find((s) => s.target === 'down')!.metrics;
    const thrown = await benchServe({
      targets: [{ name: 'x', url: ok.url, model: 'm' }],
      workload,
      numRounds: 1,
      progress: false,
      send: async () => {
        throw new Error('client bug');
      },
    });
    assert.deepEqual(thrown.summaries[0]!.metrics.errors, ['client bug']);
    assert.equal(down.numErrors, 4);
    assert.ok(down.errors.length > 0);
    assert.equal(result.summaries.find((s) => s.target === 'ok')!.metrics.numErrors, 0);
    assert.equal(result.workload.levels[0]!.burstiness, 0.5, 'the arrivals\' shape in the result');
  } finally {
    await ok.close();
  }
});

test('W5 over a prefix-caching server: the shared prefix is cached within a round, never across rounds', async () => {
  const seen: string[][] = [];
  const pageWords = 8;
  const cachedTokens = (prompt: string | number[]) => {
    const words = (prompt as string).split(' ');
    let best = 0;
    for (const s of seen) {
      let n = 0;
      while (n < s.length && n < words.length && s[n] === words[n]) n++;
      best = Math.max(best, n);
    }
    seen.push(words);
    return Math.floor(best / pageWords) * pageWords;
  };
  const server = await startMockServer({ prefillDelayMs: 1, tokenDelayMs: 1, cachedTokens });
  try {
    const workload = buildW5({ numRequests: 8, systemPromptTokens: 40, suffixTokens: 5, outputTokens: 2, concurrency: 1 });
    const result = await benchServe({ targets: [{ name: 'q', url: server.url, model: 'm' }], workload, numRounds: 2, progress: false });
    // Per round: the first request computes everything; the other 7 reuse the 40 system words (the nonce in place of
    // their first 4), floored to pages of 8.
    assert.deepEqual(result.runs.map((r) => r.metrics.numCachedPromptTokens), [7 * 40, 7 * 40]);
    assert.equal(result.summaries[0]!.metrics.numCachedPromptTokens, 2 * 7 * 40);
    assert.equal(result.summaries[0]!.metrics.numPromptTokens, 2 * 8 * 45);
    assert.match(reportMarkdown({ bench: result }), /\| 720 \(560\) \|/);
  } finally {
    await server.close();
  }
});
