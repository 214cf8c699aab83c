import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  applyNonce,
  arrivalGapsMs,
  buildCustomWorkload,
  buildW3,
  buildW5,
  freshNonce,
  loadOfflineWorkload,
  parseOfflineWorkload,
  parseJsonlPrompts,
  poissonGapsMs,
  seededRng,
} from '../../src/lab/workloads.js';

test('W3: five concurrency levels, 4x requests (at least 16), 1024-token prompts, 128 tokens, EOS ignored, fresh nonces', () => {
  const w = buildW3();
  assert.deepEqual(w.levels.map((l) => l.concurrency), [1, 8, 32, 128, 256]);
  assert.deepEqual(w.levels.map((l) => l.requests.length), [16, 32, 128, 512, 1024]);
  for (const l of w.levels) {
    assert.equal(l.nonce, 'per-request');
    assert.equal(l.ignoreEos, true);
    assert.equal(l.requestRatePerS, null);
  }
  const r = w.levels[1]!.requests[0]!;
  assert.equal(r.maxTokens, 128);
  assert.equal((r.prompt as string).split(' ').length, 1024);
  assert.equal(buildW3({ nonce: false }).levels[0]!.nonce, 'none');
  const ids = buildW3({ promptFormat: 'ids', concurrencies: [2], vocabSize: 1000 });
  const p = ids.levels[0]!.requests[0]!.prompt as number[];
  assert.equal(p.length, 1024);
  assert.ok(p.every((x) => Number.isInteger(x) && x >= 100 && x < 1000));
  assert.equal(ids.promptFormat, 'ids');
});

test('W5: 64 requests share a 2000-token system prompt, differ in a 100-token suffix, one nonce per level', () => {
  const w = buildW5();
  const l = w.levels[0]!;
  assert.equal(l.concurrency, 16);
  assert.equal(l.nonce, 'per-level');
  assert.equal(l.requests.length, 64);
  const words = l.requests.map((r) => (r.prompt as string).split(' '));
  assert.ok(words.every((ws) => ws.length === 2100));
  const system = words[0]!.slice(0, 2000).join(' ');
  assert.ok(words.every((ws) => ws.slice(0, 2000).join(' ') === system));
  assert.equal(new Set(words.map((ws) => ws.slice(2000).join(' '))).size, 64);
  assert.ok(l.requests.every((r) => r.maxTokens === 64));
});

test('nonces: text prefix, id prompts keep their length, fresh each time', () => {
  const a = freshNonce(32000);
  const b = freshNonce(32000);
  assert.notEqual(a.text, b.text);
  assert.equal(applyNonce('hello world', a), `${a.text} hello world`, 'a prompt shorter than the nonce gets it in front');
  assert.equal(a.text.split(' ').length, 4, 'a text nonce is 4 words');
  const words = Array.from({ length: 64 }, (_, i) => `w${i}`).join(' ');
  const withWords = applyNonce(words, a) as string;
  assert.equal(withWords.split(' ').length, 64, 'the nonce replaces the first words: the prompt keeps its length');
  assert.ok(withWords.startsWith(`${a.text} w4 `));
  const ids = [500, 501, 502, 503, 504, 505];
  const withNonce = applyNonce(ids, a) as number[];
  assert.equal(withNonce.length, ids.length);
  assert.deepEqual(withNonce.slice(0, 4), a.ids);
  assert.deepEqual(withNonce.slice(4), [504, 505]);
});

test('custom workloads: random lengths in bounds, rate or concurrency required', () => {
  const w = buildCustomWorkload({ numRequests: 200, promptTokens: { min: 10, max: 20 }, outputTokens: { min: 5, max: 7 }, concurrency: 4, seed: 1 });
  const lens = w.levels[0]!.requests.map((r) => (r.prompt as string).split(' ').length);
  assert.equal(Math.min(...lens), 10);
  assert.equal(Math.max(...lens), 20);
  const outs = new Set(w.levels[0]!.requests.map((r) => r.maxTokens));
  assert.deepEqual([...outs].sort(), [5, 6, 7]);
  assert.equal(w.levels[0]!.name, 'c4');
  assert.throws(() => buildCustomWorkload({ numRequests: 1, outputTokens: 5 }), /concurrency, a request rate/);
  const rated = buildCustomWorkload({ numRequests: 3, promptTokens: 4, outputTokens: 2, requestRatePerS: 5 });
  assert.equal(rated.levels[0]!.requestRatePerS, 5);
  assert.equal(rated.levels[0]!.concurrency, null);
});

test('JSONL prompts: text or ids, optional max_tokens, errors name the line', (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'quire-wl-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const path = join(dir, 'p.jsonl');
  writeFileSync(path, '{"prompt": "a b c", "max_tokens": 9}\n\n{"prompt": [1, 2, 3, 4]}\n');
  const w = buildCustomWorkload({ numRequests: 3, outputTokens: 16, jsonlPath: path, concurrency: 1 });
  const rs = w.levels[0]!.requests;
  assert.deepEqual(rs.map((r) => [r.prompt, r.maxTokens, r.approxPromptTokens]), [
    ['a b c', 9, 3],
    [[1, 2, 3, 4], 16, 4],
    ['a b c', 9, 3],
  ]);
  assert.throws(() => parseJsonlPrompts('{"prompt": 3}\n', 'x.jsonl'), /x\.jsonl:1: "prompt" must be/);
  assert.throws(() => parseJsonlPrompts('{"prompt": "a"}\nnope\n', 'x.jsonl'), /x\.jsonl:2: not JSON/);
  assert.throws(() => parseJsonlPrompts('{"prompt": "a", "max_tokens": 0}', 'x.jsonl'), /max_tokens/);
});

test('Poisson gaps have mean 1/rate', () => {
  const gaps = poissonGapsMs(20000, 50, seededRng(9));
  const meanMs = gaps.reduce((s, g) => s + g, 0) / gaps.length;
  assert.ok(Math.abs(meanMs - 20) < 0.6, `mean gap ${meanMs} ms`);
  assert.ok(gaps.every((g) => g >= 0));
});

test('bursty arrivals (vLLM\'s --burstiness): gamma gaps of mean 1/rate, spread 1/sqrt(burstiness); 1 is Poisson', () => {
  const stats = (gaps: number[]) => {
    const mean = gaps.reduce((s, g) => s + g, 0) / gaps.length;
    const sd = Math.sqrt(gaps.reduce((s, g) => s + (g - mean) ** 2, 0) / gaps.length);
    return { mean, cv: sd / mean };
  };
  for (const burstiness of [0.25, 0.5, 2, 4]) {
    const gaps = arrivalGapsMs(40000, 50, seededRng(11), burstiness);
    const { mean, cv } = stats(gaps);
    assert.ok(Math.abs(mean - 20) < 0.05 * 20, `burstiness ${burstiness}: mean gap ${mean} ms`);
    assert.ok(Math.abs(cv - 1 / Math.sqrt(burstiness)) < 0.05 / Math.sqrt(burstiness), `burstiness ${burstiness}: cv ${cv}`);
    assert.ok(gaps.every((g) => g >= 0 && Number.isFinite(g)));
  }
  assert.deepEqual(arrivalGapsMs(50, 8, seededRng(3), 1), poissonGapsMs(50, 8, seededRng(3)), 'burstiness 1: the Poisson draws');
  assert.throws(() => arrivalGapsMs(5, 8, seededRng(3), 0), /burstiness 0: expected a positive number/);
  assert.throws(() => arrivalGapsMs(5, 8, seededRng(3), Number.NaN), /expected a positive number/);
});

test('a custom workload keeps its burstiness with its request rate, and needs the rate for it', () => {
  const w = buildCustomWorkload({ numRequests: 3, promptTokens: 4, outputTokens: 2, requestRatePerS: 10, burstiness: 0.5 });
  assert.equal(w.levels[0]!.burstiness, 0.5);
  assert.equal(w.levels[0]!.name, 'r10b0.5');
  const poisson = buildCustomWorkload({ numRequests: 3, promptTokens: 4, outputTokens: 2, requestRatePerS: 10, burstiness: 1 });
  assert.equal(poisson.levels[0]!.burstiness, undefined);
  assert.equal(poisson.levels[0]!.name, 'r10');
  assert.throws(() => buildCustomWorkload({ numRequests: 3, outputTokens: 2, concurrency: 2, burstiness: 0.5 }),
    /burstiness shapes the arrivals of a request rate/);
});

test('W1 from offline-256.json: 256 id prompts, all at once', () => {
  const w = loadOfflineWorkload(new URL('../../../bench/offline-256.json', import.meta.url).pathname);
  const l = w.levels[0]!;
  assert.equal(l.requests.length, 256);
  assert.equal(l.concurrency, null);
  assert.equal(l.nonce, 'none');
  assert.equal(l.requests.reduce((s, r) => s + (r.prompt as number[]).length, 0), 142827);
  assert.equal(l.requests.reduce((s, r) => s + r.maxTokens, 0), 133966);
  assert.throws(() => parseOfflineWorkload('{"requests": [{"prompt_token_ids": "x", "max_tokens": 3}]}', 'w1'), /w1: request 0 needs/);
});
