// The engine lets the backend pick tokens (Backend.sampleTokens, logits stay on
// the device) whenever no sampled row needs its logits on the host.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { EngineCore } from '../../src/engine/engine-core.js';
import { createEngineCore } from '../../src/engine/create-engine.js';
import { engineOptions } from '../../src/engine/options.js';
import type { EngineOutput } from '../../src/engine/types.js';
import { defaultSamplingParams, type SamplingParams } from '../../src/sampling/params.js';
import { makeTestModel } from '../../src/tools/make-test-model.js';

let dir = '';
before(async () => {
  dir = mkdtempSync(join(tmpdir(), 'quire-devsample-'));
  await makeTestModel({ shape: 'tiny-qwen3', outDir: dir, dtype: 'f32', seed: 0 });
});
after(() => rmSync(dir, { recursive: true, force: true }));

async function run(requests: Partial<SamplingParams>[]): Promise<{ tokens: number[][]; numDeviceSteps: number;
  numLogitSteps: number; outputs: EngineOutput[] }> {
  const core: EngineCore = await createEngineCore(engineOptions({ model: dir, backend: 'cpu', cpuThreads: 1, seed: 3 }));
  const backend = core['model'].backend;
  let numDeviceSteps = 0;
  let numLogitSteps = 0;
  const sampleTokens = backend.sampleTokens.bind(backend);
  backend.sampleTokens = (l, s) => { numDeviceSteps++; return sampleTokens(l, s); };
  const model = core['model'];
  const forward = model.forward.bind(model);
  model.forward = (b) => { numLogitSteps++; return forward(b); };
  try {
    requests.forEach((p, i) => core.addRequest({ requestId: `r${i}`, promptTokenIds: [5, 9, 11 + i, 40],
      sampling: defaultSamplingParams({ maxTokens: 6, ignoreEos: true, ...p }), arrivalTime: 0, priority: 0,
      cacheSalt: null }));
    const outputs: EngineOutput[] = [];
    while (core.hasWork()) outputs.push(...core.step());
    const tokens = requests.map((_, i) => outputs.filter((o) => o.requestId === `r${i}`).flatMap((o) => o.newTokenIds));
    return { tokens, numDeviceSteps, numLogitSteps, outputs };
  } finally {
    core.dispose();
  }
}

test('plain greedy and seeded requests are sampled by the backend, never through host logits', async () => {
  const r = await run([{ temperature: 0 }, { temperature: 0.5, topK: 20, topP: 0.75, seed: 7 }]);
  assert.equal(r.numLogitSteps, 0);
  assert.ok(r.numDeviceSteps >= 6, `${r.numDeviceSteps} steps`);
  assert.ok(r.tokens.every((t) => t.length === 6));
  const again = await run([{ temperature: 0 }, { temperature: 0.5, topK: 20, topP: 0.75, seed: 7 }]);
  assert.deepEqual(again.tokens, r.tokens, 'seeded sampling reproduces');
});

test('a row asking for logprobs sends the whole step through the host sampler, with the same tokens', async () => {
  const device = await run([{ temperature: 0 }, { temperature: 0.5, seed: 7 }]);
  const host = await run([{ temperature: 0, logprobs: 2 }, { temperature: 0.5, seed: 7 }]);
  assert.equal(host.numDeviceSteps, 0);
  assert.ok(host.numLogitSteps >= 6);
  assert.deepEqual(host.tokens, device.tokens);
  assert.ok(host.outputs.some((o) => o.logprobs?.[0]?.top.length === 2));
});

test('allowed_token_ids and bad_words go through the host sampler: tokens from the set, no bad word', async () => {
  const free = await run([{ temperature: 0, maxTokens: 8 }, { temperature: 0, maxTokens: 8 }]);
  const banned = free.tokens[1]![0]!;
  const allowed = [7, 19, 200, free.tokens[0]![0]!];
  const r = await run([{ temperature: 0.8, seed: 5, maxTokens: 8, allowedTokenIds: allowed },
    { temperature: 0, maxTokens: 8, badWords: [[banned]] }]);
  assert.equal(r.numDeviceSteps, 0);
  assert.ok(r.tokens[0]!.every((t) => allowed.includes(t)), `${r.tokens[0]}`);
  assert.ok(!r.tokens[1]!.includes(banned), 'the banned token never comes');
  assert.notEqual(r.tokens[1]![0], free.tokens[1]![0]);
});

test('stats count the bytes a step must read at the least: weights once, each sequence\'s KV once', async () => {
  const core = await createEngineCore(engineOptions({ model: dir, backend: 'cpu', cpuThreads: 1 }));
  try {
    const P = 9;
    const G = 5;
    core.addRequest({ requestId: 'a', promptTokenIds: Array.from({ length: P }, (_, i) => i + 3),
      sampling: defaultSamplingParams({ maxTokens: G, ignoreEos: true, temperature: 0 }), arrivalTime: 0, priority: 0,
      cacheSalt: null });
    while (core.hasWork()) core.step();
    const s = core.stats();
    const model = core['model'];
    let kvTokens = P;
    for (let i = 1; i < G; i++) kvTokens += P + i;
    assert.equal(s.numSteps, G);
    assert.equal(s.minBytesRead, G * model.weightBytesPerStep() + kvTokens * model.kvBytesPerToken());
    assert.ok(s.executeMs > 0 && s.hostMs > 0);
  } finally {
    core.dispose();
  }
});

test('a hybrid model\'s floor also counts every scheduled sequence\'s recurrent state, read and written a step',
  async () => {
  const hybrid = mkdtempSync(join(tmpdir(), 'quire-floor-'));
  await makeTestModel({ shape: 'tiny-qwen3.5', outDir: hybrid, dtype: 'f32', seed: 0 });
  const core = await createEngineCore(engineOptions({ model: hybrid, backend: 'cpu', cpuThreads: 1 }));
  try {
    const [P, G] = [6, 3];
    for (const id of ['a', 'b']) {
      core.addRequest({ requestId: id, promptTokenIds: Array.from({ length: P }, (_, i) => i + 3),
        sampling: defaultSamplingParams({ maxTokens: G, ignoreEos: true, temperature: 0 }), arrivalTime: 0, priority: 0,
        cacheSalt: null });
    }
    while (core.hasWork()) core.step();
    const s = core.stats();
    const model = core['model'];
    const state = core.info.bytesPerStateSlot;
    assert.ok(state > 0, 'the model keeps a recurrent state');
    let kvTokens = 2 * P;
    for (let i = 1; i < G; i++) kvTokens += 2 * (P + i);
    assert.equal(s.numSteps, G, 'both requests in every step');
    assert.equal(s.minBytesRead,
      G * model.weightBytesPerStep() + kvTokens * model.kvBytesPerToken() + G * 2 * 2 * state);
  } finally {
    core.dispose();
    rmSync(hybrid, { recursive: true, force: true });
  }
});
