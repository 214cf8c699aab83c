import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  HttpGenerator,
  compareToReference,
  formatGateSummary,
  formatMismatch,
  gatesPassed,
  loadGatePrompts,
  opsCheck,
  parseTestRunnerOutput,
  referenceCheck,
  runTranscriptGate,
  transcriptCheck,
  type Generator,
} from '../../src/lab/gate.js';
import { fakeTokenId, startMockServer } from './mock-openai.js';

const prompts = loadGatePrompts(new URL('../../../bench/gate-prompts.json', import.meta.url).pathname);

function fakeGenerator(plant?: { promptIndex: number; tokenIndex: number }): Generator {
  return {
    async generate(ps, maxTokens) {
      return ps.map((p, i) => {
        const tokenIds = Array.from({ length: maxTokens }, (_, t) => fakeTokenId(p, t));
        if (plant && plant.promptIndex === i) tokenIds[plant.tokenIndex] = tokenIds[plant.tokenIndex]! + 1;
        return { tokenIds, text: tokenIds.join(' ') };
      });
    },
  };
}

test('the shipped gate prompt set is varied and short', () => {
  assert.ok(prompts.prompts.length >= 8);
  assert.equal(new Set(prompts.prompts.map((p) => p.id)).size, prompts.prompts.length);
  assert.ok(prompts.maxTokens > 0 && prompts.maxTokens <= 64);
});

test('transcript gate passes an unchanged transcript and catches a one-token change', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'quire-gate-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const canonicalPath = join(dir, 'canonical.json');
  const base = { prompts, pathKey: 'cpu-f32', canonicalPath };
  const missing = await runTranscriptGate({ ...base, generator: fakeGenerator(), mode: 'check' });
  assert.equal(missing.passed, false);
  assert.match(missing.problem!, /no recorded transcript for path cpu-f32/);

  const recorded = await runTranscriptGate({ ...base, generator: fakeGenerator(), mode: 'record' });
  assert.equal(recorded.recorded, true);
  const file = JSON.parse(readFileSync(canonicalPath, 'utf8')) as { paths: Record<string, { md5: string }> };
  assert.equal(file.paths['cpu-f32']!.md5, recorded.md5);

  const same = await runTranscriptGate({ ...base, generator: fakeGenerator(), mode: 'check' });
  assert.equal(same.passed, true);
  assert.equal(same.md5, recorded.md5);
  assert.equal(transcriptCheck(same).passed, true);

  const planted = await runTranscriptGate({ ...base, generator: fakeGenerator({ promptIndex: 3, tokenIndex: 9 }), mode: 'check' });
  assert.equal(planted.passed, false);
  assert.notEqual(planted.md5, recorded.md5);
  assert.equal(planted.mismatches.length, 1);
  const m = planted.mismatches[0]!;
  assert.equal(m.promptId, prompts.prompts[3]!.id);
  assert.equal(m.index, 9);
  assert.equal(m.expectedContext.length, 9);
  assert.deepEqual(m.expectedContext.slice(0, 4), m.actualContext.slice(0, 4));
  assert.equal(m.actualContext[4], m.expectedContext[4]! + 1);
  const text = formatMismatch(m);
  assert.match(text, /first difference at token 9/);
  assert.match(text, new RegExp(`prompt ${m.promptId}: "Once upon a time`));
  assert.match(transcriptCheck(planted).detail, new RegExp(`${m.promptId}@9`));

  const other = await runTranscriptGate({ ...base, pathKey: 'cuda-bf16-graphs', generator: fakeGenerator({ promptIndex: 0, tokenIndex: 0 }), mode: 'record' });
  assert.notEqual(other.md5, recorded.md5);
  const again = await runTranscriptGate({ ...base, generator: fakeGenerator(), mode: 'check' });
  assert.equal(again.passed, true, 'recording one path leaves the others');
});

test('HTTP generator reads token ids from the stream and asks for greedy, ignore_eos', async () => {
  const server = await startMockServer({ prefillDelayMs: 0, tokenDelayMs: 0 });
  try {
    const gen = new HttpGenerator(server.url, 'm');
    const out = await gen.generate(['hello', [1, 2, 3]], 5);
    assert.deepEqual(out[0]!.tokenIds, [0, 1, 2, 3, 4].map((i) => fakeTokenId('hello', i)));
    assert.deepEqual(out[1]!.tokenIds, [0, 1, 2, 3, 4].map((i) => fakeTokenId([1, 2, 3], i)));
    assert.equal(server.bodies[0]!['temperature'], 0);
    assert.equal(server.bodies[0]!['ignore_eos'], true);
    assert.equal(server.bodies[0]!['return_token_ids'], true);
  } finally {
    await server.close();
  }
});

const ln = Math.log;
const thresholds = { 'cuda-fp8': { klMeanMax: 0.01, klMaxMax: 0.05, top1AgreementMin: 0.99, maxAbsErrorMax: 0.1 } };

test('reference gate: exact KL, top-1 and max abs error on full vectors', () => {
  const reference = { prompts: [{ id: 'p', steps: [{ logprobs: [ln(0.5), ln(0.5)] }, { logits: [2, 0, -1] }] }] };
  const same = compareToReference(
    { prompts: [{ id: 'p', steps: [{ logits: [0, 0] }, { logits: [3, 1, 0] }] }] },
    reference,
    thresholds,
    'cuda-fp8',
  );
  assert.ok(same.klMax < 1e-12);
  assert.equal(same.top1Agreement, 1);
  assert.ok(same.maxAbsError < 1e-12, 'logits shifted by a constant are the same distribution');
  assert.equal(same.passed, true);

  const off = compareToReference(
    { prompts: [{ id: 'p', steps: [{ logprobs: [ln(0.75), ln(0.25)] }] }] },
    { prompts: [{ id: 'p', steps: [{ logprobs: [ln(0.5), ln(0.5)] }] }] },
    thresholds,
    'cuda-fp8',
  );
  const expectedKl = 0.5 * ln(0.5 / 0.75) + 0.5 * ln(0.5 / 0.25);
  assert.ok(Math.abs(off.klMean - expectedKl) < 1e-12, `${off.klMean}`);
  assert.ok(Math.abs(off.maxAbsError - ln(2)) < 1e-12);
  assert.equal(off.top1Agreement, 1);
  assert.equal(off.passed, false);
  assert.ok(off.failures.some((f) => /KL mean/.test(f)));
  assert.equal(referenceCheck(off).passed, false);

  const flipped = compareToReference(
    { prompts: [{ id: 'p', steps: [{ logits: [0, 2, -1] }] }] },
    { prompts: [{ id: 'p', steps: [{ logits: [2, 0, -1] }] }] },
    thresholds,
    'cuda-fp8',
  );
  assert.equal(flipped.top1Agreement, 0);
  // tied reference tops: either tied token agrees, a token below them does not
  const tied = { prompts: [{ id: 'p', steps: [{ top: [{ tokenId: 3, logprob: ln(0.4) }, { tokenId: 7, logprob: ln(0.4) }, { tokenId: 1, logprob: ln(0.2) }] }] }] };
  const pick = (id: number) => compareToReference({ prompts: [{ id: 'p', steps: [{ top: [{ tokenId: id, logprob: ln(0.5) }] }] }] },
    tied, thresholds, 'cuda-fp8').top1Agreement;
  assert.deepEqual([pick(3), pick(7), pick(1)], [1, 1, 0]);
  assert.throws(() => compareToReference(reference, reference, thresholds, 'cpu-f32'), /no reference thresholds for path cpu-f32/);
});

test('reference gate on top-k logprobs: the rest of the mass is one bucket', () => {
  const reference = { prompts: [{ id: 'p', steps: [{ top: [{ tokenId: 4, logprob: ln(0.5) }, { tokenId: 9, logprob: ln(0.3) }] }] }] };
  const same = compareToReference(reference, reference, thresholds, 'cuda-fp8');
  assert.ok(same.klMax < 1e-12);
  const shifted = compareToReference(
    { prompts: [{ id: 'p', steps: [{ top: [{ tokenId: 4, logprob: ln(0.6) }, { tokenId: 9, logprob: ln(0.3) }] }] }] },
    reference,
    thresholds,
    'cuda-fp8',
  );
  const expectedKl = 0.5 * ln(0.5 / 0.6) + 0.3 * ln(0.3 / 0.3) + 0.2 * ln(0.2 / 0.1);
  assert.ok(Math.abs(shifted.klMean - expectedKl) < 1e-9, `${shifted.klMean} vs ${expectedKl}`);
  assert.ok(Math.abs(shifted.maxAbsError - ln(0.6 / 0.5)) < 1e-12);
  const missing = compareToReference({ prompts: [] }, reference, thresholds, 'cuda-fp8');
  assert.equal(missing.passed, false);
  assert.match(missing.failures[0]!, /prompt p: missing/);
});

test('op gate reads TAP and spec reporter output', () => {
  const tap = ['TAP version 13', '# Subtest: rmsnorm', 'ok 1 - rmsnorm', '# Subtest: rope', 'not ok 2 - rope', '  ---', 'ok 3 - gemm # SKIP no cublasLt', '1..3', '# tests 3', '# pass 1', '# fail 1', '# skipped 1'].join('\n');
  const t = parseTestRunnerOutput(tap);
  assert.deepEqual(t, { numTests: 3, numPassed: 1, numFailed: 1, numSkipped: 1, failedNames: ['rope'] });
  assert.equal(opsCheck('cuda', t).passed, false);
  assert.match(opsCheck('cuda', t).detail, /1\/2 passed, 1 skipped; failed: rope/);
  const spec = ['\x1b[32m✔ rmsnorm bf16 (3.1ms)\x1b[39m', '✔ rope (0.9ms)', '✖ paged attention (12ms)', '﹣ fp8 gemm (0.1ms) # SKIP', '✖ failing tests:', '✖ paged attention (12ms)'].join('\n');
  const s = parseTestRunnerOutput(spec);
  assert.deepEqual(s, { numTests: 4, numPassed: 2, numFailed: 1, numSkipped: 1, failedNames: ['paged attention'] });
  const green = parseTestRunnerOutput('✔ a (1ms)\n✔ b (2ms)\nℹ tests 2\nℹ pass 2\nℹ fail 0');
  assert.equal(opsCheck('cuda', green).passed, true);
  assert.equal(opsCheck('cuda', green).detail, '2/2 passed');
});

test('gate summary table with pre and post columns', () => {
  const pre = [
    { name: 'transcript cpu-f32', kind: 'transcript' as const, passed: true, detail: 'md5 aa' },
    { name: 'ops cuda', kind: 'ops' as const, passed: true, detail: '10/10 passed' },
  ];
  const post = [{ name: 'transcript cpu-f32', kind: 'transcript' as const, passed: false, detail: 'md5 bb != aa | x' }];
  const md = formatGateSummary({ pre, post });
  assert.equal(
    md,
    ['| gate | pre | post |', '|---|---|---|', '| transcript cpu-f32 | PASS md5 aa | FAIL md5 bb != aa \\| x |', '| ops cuda | PASS 10/10 passed | - |'].join('\n'),
  );
  assert.equal(gatesPassed({ pre, post }), false);
  assert.equal(formatGateSummary({ pre, post: [] }).split('\n')[0], '| gate | result |');
});
