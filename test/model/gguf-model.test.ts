// GGUF models (src/loader/gguf*.ts) on the CPU backend: a make-test-model checkpoint written as GGUF by the test
// converter (src/tools/gguf-convert.ts) computes the same logits as the safetensors model: exactly in f32 (llama's
// permuted q/k rows undone, qwen2's biases, mixtures of experts' stacked experts), within the quantization's error in Q8_0 and Q4_K_M.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CpuBackend } from '../../src/backend/cpu/cpu-backend.js';
import { defaultModelDir } from '../../src/loader/default-model.js';
import { loadModel, loadModelDir } from '../../src/loader/model-dir.js';
import { Model } from '../../src/model/model.js';
import { seededRandom } from '../../src/model/random-weights.js';
import { makeTestModel } from '../../src/tools/make-test-model.js';
import { modelDirToGguf, type GgufQuantization } from '../../src/tools/gguf-convert.js';
import { GgufFile } from '../../src/loader/gguf.js';
import { runSteps } from './helpers.js';

const root = mkdtempSync(join(tmpdir(), 'quire-gguf-model-'));
const backend = new CpuBackend({ kvCacheBytes: 1 << 24, numThreads: 1 });
after(() => {
  backend.dispose();
  rmSync(root, { recursive: true, force: true });
});

const rms = (a: number[] | Float32Array): number => Math.sqrt([...a].reduce((s, v) => s + v * v, 0) / a.length);

async function logitsOf(path: string, ids: number[]): Promise<Float32Array[]> {
  const dir = await loadModel(path);
  const model = Model.load(dir.config, dir.weights, backend);
  const steps = [[{ seq: 'a', start: 0, end: 10 }], [{ seq: 'a', start: 10, end: ids.length }]];
  return runSteps(model, { a: ids }, steps, ids.length).get('a')!;
}

const ids = (vocab: number, n: number, seed: number): number[] => {
  const rand = seededRandom(seed);
  return Array.from({ length: n }, () => Math.floor(rand() * vocab));
};

// tiny-qwen3-moe-all as qwen3moe, tiny-mixtral as llama with experts (their experts stacked [E, rows, cols]);
// tiny-phi3 as phi3 (attn_qkv, ffn_up holding gate and up, its sliding window in the metadata)
for (const shape of ['tiny-qwen3', 'tiny-llama', 'tiny-qwen2', 'tiny-llama-bias', 'tiny-qwen3-moe-all', 'tiny-mixtral',
  'tiny-phi3']) {
  test(`${shape} as an f32 GGUF gives exactly the safetensors model's logits`, async () => {
    const dir = join(root, shape);
    await makeTestModel({ shape, outDir: dir, dtype: 'f32', seed: 3 });
    modelDirToGguf(dir, join(dir, 'model-f32.gguf'), 'f32');
    const prompt = ids(loadModelDir(dir).config.vocabSize, 14, 5);
    const want = await logitsOf(dir, prompt);
    const got = await logitsOf(join(dir, 'model-f32.gguf'), prompt);
    const [hf, gguf] = [loadModelDir(dir).config, (await loadModel(join(dir, 'model-f32.gguf'))).config];
    assert.deepEqual([gguf.architecture, gguf.slidingWindow, gguf.moe], [hf.architecture, hf.slidingWindow, hf.moe]);
    assert.equal(got.length, want.length);
    for (let p = 0; p < want.length; p++) assert.deepEqual(got[p], want[p], `position ${p}`);
  });
}

const demoLogits: { prompt: number[]; want?: Float32Array[] } = { prompt: ids(6144, 16, 9) };
before(async () => {
  demoLogits.want = await logitsOf(defaultModelDir(), demoLogits.prompt);
});

// relative RMS error of the logits: Q8_0 keeps ~0.4% of each weight, Q4_K_M ~3-7% (measured 0.3% and 4% here)
for (const [q, bound] of [['f32', 0], ['q8_0', 0.02], ['q4_k_m', 0.15]] as [GgufQuantization, number][]) {
  test(`the demo model as a ${q} GGUF: logits within ${bound * 100}% RMS of the safetensors model's`, async () => {
    const file = join(root, `demo-${q}.gguf`);
    modelDirToGguf(defaultModelDir(), file, q);
    const got = await logitsOf(file, demoLogits.prompt);
    const errors = demoLogits.want!.map((row, p) => rms(row.map((v, i) => v - got[p]![i]!)) / rms(row));
    assert.ok(Math.max(...errors) <= bound, `errors ${errors.map((e) => e.toFixed(4)).join(' ')}`);
    if (bound > 0) assert.ok(Math.max(...errors) > 1e-4, 'the quantization shows');
  });
}

test('tiny-qwen3-moe-all as a q8_0 GGUF: its experts\' slabs read through their blocks, logits near the safetensors model\'s', async () => {
  const dir = join(root, 'tiny-qwen3-moe-all');  // written by the f32 test above
  const file = join(dir, 'model-q8_0.gguf');
  modelDirToGguf(dir, file, 'q8_0');
  const prompt = ids(loadModelDir(dir).config.vocabSize, 14, 5);
  const want = await logitsOf(dir, prompt);
  const got = await logitsOf(file, prompt);
  const errors = want.map((row, p) => rms(row.map((v, i) => v - got[p]![i]!)) / rms(row));
  // Q8_0 of tiny random weights with routing near-ties: 1.1% to 2.5% (a misplaced slab is off by ~100%)
  assert.ok(Math.max(...errors) <= 0.05 && Math.max(...errors) > 1e-4, `errors ${errors.map((e) => e.toFixed(4)).join(' ')}`);
  // each expert's tensor is exactly its slab of the stacked one
  const weights = (await loadModel(file)).weights;
  const gguf = await GgufFile.open(file);
  for (const [g, hf] of [['ffn_gate_exps', 'gate_proj'], ['ffn_down_exps', 'down_proj']]) {
    const whole = gguf.readF32(`blk.2.${g}.weight`);
    for (const e of [0, 5, 7]) {
      const t = weights.read(`model.layers.2.mlp.experts.${e}.${hf}.weight`);
      const slab = new Float32Array(t.data.buffer, t.data.byteOffset, t.data.byteLength / 4);
      assert.deepEqual(slab, whole.subarray(e * slab.length, (e + 1) * slab.length), `${g} expert ${e}`);
    }
  }
});

test('a Qwen3-MoE with a dense layer is not written as GGUF: llama.cpp\'s qwen3moe has experts in every layer', async () => {
  const dir = join(root, 'tiny-qwen3-moe');
  await makeTestModel({ shape: 'tiny-qwen3-moe', outDir: dir, dtype: 'f32', seed: 3 });
  assert.throws(() => modelDirToGguf(dir, join(dir, 'm.gguf'), 'f32'), /experts in every layer .*mlp_only_layers/);
});
