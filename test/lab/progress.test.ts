// Long lab steps show progress: log lines with an estimate of the time left when not on a terminal; the weights
// reader's listener reports bytes and tensors; bench offline ends with a human table comparing cache on and off.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startProgress } from '../../src/lab/progress.js';
import { offlineSummary, type OfflineRun } from '../../src/lab/offline-summary.js';
import { checkpointSize, setWeightsReadListener, weightsReadLogger } from '../../src/loader/load-progress.js';
import { openWeights } from '../../src/loader/model-dir.js';
import { emptyStats } from '../../src/engine/stats.js';
import { makeTestModel } from '../../src/tools/make-test-model.js';

function fakeStream(): NodeJS.WriteStream & { text: string } {
  const s = { text: '', isTTY: false, write(chunk: string) { s.text += chunk; return true; } };
  return s as unknown as NodeJS.WriteStream & { text: string };
}

test('progress off a terminal: a line every interval with the share done and the time left, and a last line', () => {
  let t = 0;
  const stream = fakeStream();
  const p = startProgress({ label: 'w1', total: 100, unit: 'requests', stream, logEveryMs: 1000, now: () => t });
  t = 500;
  p.update(10);
  assert.equal(stream.text, '', 'nothing before the interval');
  t = 2000;
  p.update(25);
  assert.match(stream.text, /^w1: 25\/100 requests \(25%\), 2\.0 s, about 6 s left\n$/);
  t = 8000;
  p.stop();
  assert.match(stream.text, /w1: 100\/100 requests \(100%\), 8\.0 s\n$/);
});

test('the weights reader reports every read: a load logs bytes and tensors of the checkpoint', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'quire-load-progress-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  await makeTestModel({ shape: 'tiny-qwen3', outDir: dir, dtype: 'f32', seed: 1 });
  const size = checkpointSize(dir)!;
  assert.ok(size.numTensors > 10 && size.numBytes > 0);
  const lines: string[] = [];
  let now = 0;
  setWeightsReadListener(weightsReadLogger(size, (l) => lines.push(l), 0, () => (now += 1)));
  try {
    const source = openWeights(dir);
    for (const name of source.names()) source.read(name);
  } finally {
    setWeightsReadListener(null);
  }
  assert.equal(lines.length, size.numTensors);
  assert.match(lines.at(-1)!, new RegExp(`loading weights: [\\d.]+ / [\\d.]+ GiB, ${size.numTensors} / ${size.numTensors} tensors`));
  const source = openWeights(dir);
  source.read(source.names()[0]!);
  assert.equal(lines.length, size.numTensors, 'no listener once it is cleared');
});

test('bench offline ends with a table, and W5 compares the prefix cache on against off', () => {
  const run = (workload: string, wallS: number, computed: number): OfflineRun => ({
    engine: 'quire', workload, numRequests: 8, numPromptTokens: 1760, numOutputTokens: 64, wallS,
    outputTokensPerS: 64 / wallS, ttftP50Ms: wallS * 300, stats: { ...emptyStats(), numPromptTokens: computed },
  });
  const text = offlineSummary([run('w5 prefix cache on', 1.5, 416), run('w5 prefix cache off', 4.5, 1760)]);
  assert.match(text, /^run +requests +prompt tok +output tok/);
  assert.match(text, /w5 prefix cache on +8 +1,760 +64 +1\.50/);
  assert.match(text, /prefix cache on vs off: 3\.00x faster \(1\.50 s against 4\.50 s\); it computed 416 of the 1,760 prompt tokens sent \(23\.6%\), against 1,760 without it/);
});

test('the offline summary and bench decode give speculative decoding\'s mean acceptance length (vLLM\'s 1 + accepted / drafts)', async () => {
  const { specDecodingLine } = await import('../../src/lab/offline-summary.js');
  const before = { numDrafts: 10, numDraftTokens: 40, numAcceptedTokens: 20, numAcceptedTokensPerPos: [8, 6, 4, 2] };
  const now = { numDrafts: 30, numDraftTokens: 120, numAcceptedTokens: 70, numAcceptedTokensPerPos: [26, 20, 16, 8] };
  assert.equal(specDecodingLine(now), 'speculative decoding: mean acceptance length 3.33 (70 of 120 draft tokens '
    + 'accepted, 58.3%, over 30 drafts; per position 0.87, 0.67, 0.53, 0.27)');
  // since an earlier reading: 20 drafts, 50 of 80 accepted
  assert.match(specDecodingLine(now, before) ?? '', /mean acceptance length 3\.50 \(50 of 80 draft tokens accepted, 62\.5%, over 20 drafts; per position 0\.90, 0\.70, 0\.60, 0\.30\)/);
  assert.equal(specDecodingLine(undefined), null);
  assert.equal(specDecodingLine(now, now), null, 'no drafts since');
  const run: OfflineRun = { engine: 'quire', workload: 'w1', numRequests: 1, numPromptTokens: 10, numOutputTokens: 10,
    wallS: 1, outputTokensPerS: 10, ttftP50Ms: 1, stats: { ...emptyStats(), specDecoding: now } };
  assert.match(offlineSummary([run]), /w1: speculative decoding: mean acceptance length 3\.33/);
});
