// A block-FP8 checkpoint (make-test-model --quantization fp8) on the CPU backend: its projections are FP8 weights,
// and its logits stay near those of the f32 model it was quantized from. W8A8 rounds weights and activations to
// e4m3 (3 mantissa bits): some 3.6% RMS error a matmul on random data, 6-9% by the logits of this two-layer random
// model, whose layers outweigh its embeddings. (That matmul on FP8 weights is fp8BlockMatmul exactly is
// test/backend/cpu-fp8.test.ts's.)

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CpuBackend } from '../../src/backend/cpu/cpu-backend.js';
import { loadModelConfig } from '../../src/loader/config.js';
import { openWeights } from '../../src/loader/model-dir.js';
import { Model } from '../../src/model/model.js';
import type { Attention } from '../../src/model/layers/attention.js';
import type { DenseMlp } from '../../src/model/layers/mlp.js';
import { seededRandom } from '../../src/model/random-weights.js';
import { makeTestModel } from '../../src/tools/make-test-model.js';
import { runSteps } from './helpers.js';

const root = mkdtempSync(join(tmpdir(), 'quire-fp8-model-'));
const backend = new CpuBackend({ kvCacheBytes: 1 << 24, numThreads: 1 });
before(async () => {
  for (const quantization of [null, 'fp8'] as const) {
    await makeTestModel({ shape: 'tiny-qwen3-128', outDir: join(root, quantization ?? 'f32'), dtype: 'f32', seed: 6, quantization });
  }
});
after(() => {
  backend.dispose();
  rmSync(root, { recursive: true, force: true });
});

const load = (name: string) => Model.load(loadModelConfig(join(root, name, 'config.json')), openWeights(join(root, name)), backend);
const rms = (a: Float32Array) => Math.sqrt(a.reduce((s, v) => s + v * v, 0) / a.length);

test('a block-FP8 model\'s logits are within 10% (RMS) of those of the model it was quantized from', () => {
  const rand = seededRandom(2);
  const ids = Array.from({ length: 24 }, () => Math.floor(rand() * 512));
  const steps = [[{ seq: 'a', start: 0, end: 16 }], [{ seq: 'a', start: 16, end: 24 }]];
  const fp8 = load('fp8');
  assert.equal((fp8.parts.layers[1]!.ffn as DenseMlp).gateUp.quantized, 'fp8_block');
  assert.equal(fp8.parts.embedTokens!.quantized, undefined);
  const quantized = runSteps(fp8, { a: ids }, steps, 3).get('a')!;
  const exact = runSteps(load('f32'), { a: ids }, steps, 3).get('a')!;
  const errors = exact.map((row, pos) => rms(row.map((v, i) => v - quantized[pos]![i]!)) / rms(row));
  assert.ok(Math.max(...errors) < 0.1, `RMS-relative errors ${errors.map((e) => e.toFixed(4)).join(' ')}`);
  assert.ok(Math.min(...errors) > 1e-3, 'the quantization shows');
});

test('--quantization fp8: a bf16 checkpoint quantized at load computes what its block-FP8 checkpoint computes', async () => {
  for (const quantization of [null, 'fp8'] as const) {
    await makeTestModel({ shape: 'tiny-qwen3-128', outDir: join(root, `bf16-${quantization ?? 'none'}`), dtype: 'bf16', seed: 7,
      quantization });
  }
  const rand = seededRandom(3);
  const ids = Array.from({ length: 20 }, () => Math.floor(rand() * 512));
  const steps = [[{ seq: 'a', start: 0, end: 12 }], [{ seq: 'a', start: 12, end: 20 }]];
  const dir = join(root, 'bf16-none');
  const online = Model.load(loadModelConfig(join(dir, 'config.json')), openWeights(dir), backend, { quantization: 'fp8' });
  assert.equal((online.parts.layers[0]!.mixer as Attention).w.qkv.weight.quantized, 'fp8_block');
  assert.equal(online.parts.lmHead!.quantized, undefined, 'the LM head and embeddings keep the checkpoint\'s dtype');
  const fromCheckpoint = runSteps(load('bf16-fp8'), { a: ids }, steps, 3).get('a')!;
  const quantizedAtLoad = runSteps(online, { a: ids }, steps, 3).get('a')!;
  assert.deepEqual(quantizedAtLoad, fromCheckpoint);
  const plain = runSteps(load('bf16-none'), { a: ids }, steps, 3).get('a')!;
  assert.notDeepEqual(plain, fromCheckpoint, 'the quantization shows');
});

test('--quantization fp8 is refused, naming why, where a projection dimension is not a multiple of 128', async () => {
  const dir = join(root, 'tiny');
  await makeTestModel({ shape: 'tiny-qwen3', outDir: dir, dtype: 'bf16', seed: 1 });
  assert.throws(() => Model.load(loadModelConfig(join(dir, 'config.json')), openWeights(dir), backend, { quantization: 'fp8' }),
    /--quantization fp8 needs every projection dimension a multiple of 128; hidden_size is 64/);
});
