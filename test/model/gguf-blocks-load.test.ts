// How the dense loader (model/architectures/dense-weights.ts) hands a GGUF file's projections to a backend that keeps
// blocks (Backend.uploadGguf): which projections, fused how, and which stay float; checked on the CPU backend with an
// uploadGguf that records its calls and uploads the dequantized values, so the logits must be the plain path's.

import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Backend, Tensor } from '../../src/backend/backend.js';
import { CpuBackend } from '../../src/backend/cpu/cpu-backend.js';
import { defaultModelDir } from '../../src/loader/default-model.js';
import { dequantize } from '../../src/loader/gguf-quants.js';
import { loadModel } from '../../src/loader/model-dir.js';
import type { GgufBlocks } from '../../src/loader/types.js';
import { Model } from '../../src/model/model.js';
import { makeTestModel } from '../../src/tools/make-test-model.js';
import { modelDirToGguf } from '../../src/tools/gguf-convert.js';
import { runSteps } from './helpers.js';

const root = mkdtempSync(join(tmpdir(), 'quire-gguf-load-'));
const cpu = new CpuBackend({ kvCacheBytes: 1 << 24, numThreads: 1 });
after(() => {
  cpu.dispose();
  rmSync(root, { recursive: true, force: true });
});

/** The CPU backend with an uploadGguf that logs each call (name: the parts' types) and uploads the dequantized rows. */
function recording(calls: Map<string, string[]>): Backend {
  const uploadGguf = (name: string, parts: readonly GgufBlocks[]): Tensor => {
    calls.set(name, parts.map((p) => p.type));
    const K = parts[0]!.shape[1];
    const rows = parts.reduce((n, p) => n + p.shape[0], 0);
    const values = new Float32Array(rows * K);
    let at = 0;
    for (const p of parts) {
      values.set(dequantize(p.type, p.data, p.shape[0] * K), at);
      at += p.shape[0] * K;
    }
    return cpu.upload({ name, dtype: 'f32', shape: [rows, K], data: new Uint8Array(values.buffer) });
  };
  return Object.assign(Object.create(cpu) as Backend, { uploadGguf });
}

async function logits(file: string, backend: Backend): Promise<Float32Array[]> {
  const dir = await loadModel(file);
  const model = Model.load(dir.config, dir.weights, backend);
  const ids = Array.from({ length: 12 }, (_, i) => (i * 37 + 5) % dir.config.vocabSize);
  return runSteps(model, { a: ids }, [[{ seq: 'a', start: 0, end: 12 }]], 3).get('a')!;
}

test('a Q4_K_M file: every projection fused as blocks (qkv of Q4_K and Q6_K parts), logits as the dequantized path\'s', async () => {
  const file = join(root, 'demo-q4_k_m.gguf');
  modelDirToGguf(defaultModelDir(), file, 'q4_k_m');
  const calls = new Map<string, string[]>();
  const got = await logits(file, recording(calls));
  assert.deepEqual(calls.get('model.layers.0.self_attn.qkv_proj.weight'), ['Q4_K', 'Q4_K', 'Q6_K']);
  assert.deepEqual(calls.get('model.layers.4.mlp.gate_up_proj.weight'), ['Q4_K', 'Q4_K']);
  assert.deepEqual(calls.get('model.layers.4.mlp.down_proj.weight'), ['Q6_K']);
  assert.deepEqual(calls.get('model.layers.2.self_attn.o_proj.weight'), ['Q4_K']);
  assert.equal(calls.size, 5 * 4, 'four projections a layer; the tied lm_head is the (float) embedding table');
  assert.deepEqual(got, await logits(file, cpu));
});

test('an untied lm_head (llama\'s output.weight) is uploaded as blocks too; QUIRE_GGUF_BLOCKS=0 uploads none', async () => {
  const dir = join(root, 'tiny-llama');
  await makeTestModel({ shape: 'tiny-llama', outDir: dir, dtype: 'f32', seed: 6 });
  const file = join(dir, 'q8_0.gguf');
  modelDirToGguf(dir, file, 'q8_0');
  const calls = new Map<string, string[]>();
  await logits(file, recording(calls));
  assert.deepEqual(calls.get('lm_head.weight'), ['Q8_0']);
  process.env.QUIRE_GGUF_BLOCKS = '0';
  try {
    calls.clear();
    await logits(file, recording(calls));
    assert.equal(calls.size, 0);
  } finally {
    delete process.env.QUIRE_GGUF_BLOCKS;
  }
});

test('a fused projection with one part not of a block type is uploaded dequantized whole; an F32 file has none', async () => {
  const file = join(root, 'demo-q4_k_m.gguf');
  modelDirToGguf(defaultModelDir(), file, 'q4_k_m');
  const dir = await loadModel(file);
  // as a file whose v is F16 beside Q4_K q and k
  const source = { ...dir.weights, readGgufBlocks: (name: string) =>
    name.endsWith('v_proj.weight') ? null : dir.weights.readGgufBlocks!(name) };
  const calls = new Map<string, string[]>();
  Model.load(dir.config, source, recording(calls));
  assert.ok(![...calls.keys()].some((n) => n.includes('qkv')), [...calls.keys()].join(', '));
  assert.deepEqual(calls.get('model.layers.0.mlp.gate_up_proj.weight'), ['Q4_K', 'Q4_K']);
  const f32 = join(root, 'demo-f32.gguf');
  modelDirToGguf(defaultModelDir(), f32, 'f32');
  calls.clear();
  await logits(f32, recording(calls));
  assert.equal(calls.size, 0);
});
