import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { CpuBackend } from '../../src/backend/cpu/cpu-backend.js';
import type { ModelConfig } from '../../src/loader/types.js';
import { Model } from '../../src/model/model.js';
import { randomWeightSource, seededRandom, tinyConfig } from '../../src/model/random-weights.js';
import { chunked, runSteps } from './helpers.js';

const backends: CpuBackend[] = [];
after(() => backends.forEach((b) => b.dispose()));

function load(config: ModelConfig, numThreads: number, kernel: 'js' | 'wasm'): Model {
  const backend = new CpuBackend({ kvCacheBytes: 1 << 24, numThreads, kernel });
  backends.push(backend);
  return Model.load(config, randomWeightSource(config, { seed: 7 }), backend);
}

function randomIds(n: number, vocab: number, seed: number): number[] {
  const rand = seededRandom(seed);
  return Array.from({ length: n }, () => Math.floor(rand() * vocab));
}

const configs: [string, ModelConfig][] = [
  ['qwen3 tied', tinyConfig('qwen3')],
  ['qwen3 untied', tinyConfig('qwen3', { tieWordEmbeddings: false })],
  ['llama untied, llama3 rope', tinyConfig('llama')],
  ['llama tied, f16', tinyConfig('llama', { tieWordEmbeddings: true, ropeScaling: null, dtype: 'f16' })],
];

for (const [[label, config], kernel] of configs.flatMap((c) => (['wasm', 'js'] as const).map((k) => [c, k] as const))) {
  test(`${label}, ${kernel} kernel: a sequence's logits are bit-identical alone, in a mixed batch, chunked 1/7/64, on 2 threads`, () => {
    const model = load(config, 1, kernel);
    const prompts = { a: randomIds(70, config.vocabSize, 1), b: randomIds(30, config.vocabSize, 2),
      c: randomIds(45, config.vocabSize, 3) };
    const alone = runSteps(model, prompts, chunked('a', 70, 70), 1).get('a')!;
    assert.equal(alone.length, 70);
    assert.notDeepEqual(alone[68], alone[69]);
    const mixed = runSteps(model, prompts, [
      [{ seq: 'b', start: 0, end: 29 }, { seq: 'c', start: 0, end: 44 }],
      [{ seq: 'b', start: 29, end: 30 }, { seq: 'a', start: 0, end: 70 }, { seq: 'c', start: 44, end: 45 }],
    ], 2).get('a')!;
    assert.deepEqual(mixed, alone, 'mixed batch');
    const interleaved = runSteps(model, prompts, chunked('a', 70, 7).map((step, i) => [
      ...(i < 3 ? [{ seq: 'c', start: i * 15, end: i * 15 + 15 }] : []), ...step,
      ...(i < 30 ? [{ seq: 'b', start: i, end: i + 1 }] : []),
    ]), 3).get('a')!;
    assert.deepEqual(interleaved, alone, 'chunks of 7 beside other sequences');
    for (const size of [1, 64]) {
      assert.deepEqual(runSteps(model, prompts, chunked('a', 70, size), 4 + size).get('a')!, alone, `chunks of ${size}`);
    }
    const threaded = load(config, 2, kernel);
    assert.deepEqual(runSteps(threaded, prompts, chunked('a', 70, 70), 5).get('a')!, alone, '2 threads');
  });
}
