import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { bytesToF32 } from '../../src/loader/dtype.js';
import { parseModelConfig } from '../../src/loader/config.js';
import { openSafetensors, openShardedSafetensors } from '../../src/loader/safetensors.js';
import { tensorBytes } from '../../src/loader/safetensors-write.js';
import { makeTestModel, testModelShapes } from '../../src/tools/make-test-model.js';
import { quantizeWeightBlocks } from '../../src/backend/fp8-linear.js';
import { FP8_QUANTIZATION_CONFIG, tensorSpecsForConfig } from '../../src/tools/test-model/shapes.js';
import { randomTensorChunks } from '../../src/tools/test-model/weights.js';
import { repoRoot, tempDir } from './helpers.js';

function stats(values: Float32Array): { mean: number; std: number } {
  const mean = values.reduce((a, b) => a + b, 0) / values.length;
  const variance = values.reduce((a, b) => a + (b - mean) ** 2, 0) / values.length;
  return { mean, std: Math.sqrt(variance) };
}

test('weights are deterministic in the seed, differ across seeds and tensors, and scale like an init', async () => {
  const root = tempDir();
  const a = await makeTestModel({ shape: 'tiny-qwen3', outDir: join(root, 'a'), seed: 1 });
  await makeTestModel({ shape: 'tiny-qwen3', outDir: join(root, 'b'), seed: 1 });
  await makeTestModel({ shape: 'tiny-qwen3', outDir: join(root, 'c'), seed: 2 });
  const read = (d: string) => readFileSync(join(root, d, 'model.safetensors'));
  assert.deepEqual(read('a'), read('b'));
  assert.notDeepEqual(read('a'), read('c'));
  assert.ok(a.numWeightBytes < 4 * 2 ** 20, 'tiny shapes are a few MB at most');
  const w = openSafetensors(join(root, 'a', 'model.safetensors'));
  const q = bytesToF32('bf16', w.read('model.layers.0.self_attn.q_proj.weight').data);
  const k = bytesToF32('bf16', w.read('model.layers.0.self_attn.k_proj.weight').data);
  assert.notDeepEqual(q.subarray(0, 64), k.subarray(0, 64));
  const qs = stats(q);
  assert.ok(Math.abs(qs.mean) < 0.002 && Math.abs(qs.std - 0.02) < 0.002, JSON.stringify(qs));
  const norm = stats(bytesToF32('bf16', w.read('model.norm.weight').data));
  assert.ok(Math.abs(norm.mean - 1) < 0.03 && norm.std > 0.01 && norm.std < 0.1, JSON.stringify(norm));
  assert.ok(new Set(q).size > 1000, 'values are varied');
});

test('sharded output holds the same tensors and bytes as a single file', async () => {
  const root = tempDir();
  await makeTestModel({ shape: 'tiny-llama', outDir: join(root, 'one'), dtype: 'f16' });
  const sharded = await makeTestModel({ shape: 'tiny-llama', outDir: join(root, 'four'), dtype: 'f16', numShards: 4 });
  assert.equal(sharded.files.length, 4);
  const one = openSafetensors(join(root, 'one', 'model.safetensors'));
  const four = openShardedSafetensors(join(root, 'four', 'model.safetensors.index.json'));
  assert.deepEqual(four.names().sort(), one.names().sort());
  for (const name of one.names()) assert.deepEqual(four.read(name), one.read(name));
  const index = JSON.parse(readFileSync(join(root, 'four', 'model.safetensors.index.json'), 'utf8'));
  assert.equal(index.metadata.total_size, sharded.numWeightBytes);
});

test('every shape has HF tensor names; bench shapes match their public parameter counts', () => {
  const shapes = testModelShapes();
  for (const name of ['tiny-qwen3', 'tiny-llama', 'qwen3-0.6b', 'qwen3-8b', 'llama-3.2-1b', 'llama-3.1-8b', 'llama-3.1-70b',
    'qwen3-30b-a3b']) {
    assert.ok(shapes[name], name);
  }
  const numParams = (shape: string) => tensorSpecsForConfig(shapes[shape]!, 'bf16').reduce((a, s) => a + tensorBytes(s) / 2, 0);
  const published: Record<string, number> = {
    'qwen3-0.6b': 0.596e9,
    'qwen3-8b': 8.19e9,
    'llama-3.2-1b': 1.236e9,
    'llama-3.1-8b': 8.03e9,
    'llama-3.1-70b': 70.55e9,
    'qwen3-30b-a3b': 30.5e9,
  };
  for (const [shape, count] of Object.entries(published)) {
    assert.ok(Math.abs(numParams(shape) / count - 1) < 0.01, `${shape}: ${numParams(shape)} vs ${count}`);
  }
  const names = tensorSpecsForConfig(shapes['tiny-qwen3']!, 'bf16').map((s) => s.name);
  for (const n of ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'q_norm', 'k_norm']) assert.ok(names.includes(`model.layers.1.self_attn.${n}.weight`), n);
  for (const n of ['mlp.gate_proj', 'mlp.up_proj', 'mlp.down_proj', 'input_layernorm', 'post_attention_layernorm']) {
    assert.ok(names.includes(`model.layers.0.${n}.weight`), n);
  }
  const llamaNames = tensorSpecsForConfig(shapes['tiny-llama']!, 'bf16').map((s) => s.name);
  assert.ok(llamaNames.includes('lm_head.weight') && !llamaNames.some((n) => n.includes('q_norm')));
  const moe = tensorSpecsForConfig(shapes['qwen3-30b-a3b']!, 'bf16').map((s) => s.name);
  assert.ok(moe.includes('model.layers.47.mlp.experts.127.down_proj.weight') && moe.includes('model.layers.0.mlp.gate.weight'));
  for (const shape of ['tiny-qwen3', 'tiny-llama', 'qwen3-0.6b', 'llama-3.2-1b', 'llama-3.1-70b']) parseModelConfig(shapes[shape], shape);
});

test('tiny-llama rope scaling changes some frequencies and keeps others', () => {
  const c = parseModelConfig(testModelShapes()['tiny-llama'], 'config.json');
  const s = c.ropeScaling!;
  assert.equal(s.type, 'llama3');
  if (s.type !== 'llama3') return;
  const wavelens = Array.from({ length: c.headDim / 2 }, (_, i) => 2 * Math.PI * c.ropeTheta ** ((2 * i) / c.headDim));
  const highFreqWavelen = s.originalMaxPositionEmbeddings / s.highFreqFactor;
  const lowFreqWavelen = s.originalMaxPositionEmbeddings / s.lowFreqFactor;
  assert.ok(wavelens.some((w) => w < highFreqWavelen), 'some frequencies unchanged');
  assert.ok(wavelens.some((w) => w > lowFreqWavelen), 'some frequencies divided by factor');
  assert.ok(wavelens.some((w) => w >= highFreqWavelen && w <= lowFreqWavelen), 'some smoothed');
});

test('a 4M-element tensor streams in chunks of bounded size', () => {
  const spec = { name: 'model.embed_tokens.weight', dtype: 'bf16' as const, shape: [4096, 1100] };
  let numBytes = 0;
  let numChunks = 0;
  for (const chunk of randomTensorChunks(spec, 0, { mean: 0, std: 0.02 })) {
    numBytes += chunk.byteLength;
    numChunks++;
    assert.ok(chunk.byteLength <= 8 * 2 ** 20);
  }
  assert.equal(numBytes, tensorBytes(spec));
  assert.equal(numChunks, 2);
});

test('repeatChunks (--fast) repeats one chunk-long window of its init\'s shared normal stream, at its name\'s offset', () => {
  const spec = { name: 'model.layers.0.mlp.up_proj.weight', dtype: 'bf16' as const, shape: [4096, 2100] };
  const init = { mean: 0, std: 0.02 };
  const fast = [...randomTensorChunks(spec, 0, init, true)];
  assert.equal(fast.length, 3);
  assert.deepEqual(fast[1], fast[0]);
  assert.deepEqual(fast[2], fast[0]!.subarray(0, fast[2]!.byteLength));
  assert.equal(fast.reduce((n, c) => n + c.byteLength, 0), tensorBytes(spec));
  // another tensor of the same init: another window of the same values
  const other = [...randomTensorChunks({ ...spec, name: 'model.layers.1.mlp.up_proj.weight' }, 0, init, true)];
  assert.notDeepEqual(other[0], fast[0]);
  const values = (c: Uint8Array) => new Uint16Array(c.buffer, c.byteOffset, 64);
  const stream = [...randomTensorChunks({ name: 'bf16 0 0 0.02', dtype: 'bf16', shape: [2 * 4 * 2 ** 20] }, 0, init)];
  const whole = new Uint16Array(stream.reduce((n, c) => n + c.byteLength, 0) / 2);
  let at = 0;
  for (const c of stream) {
    whole.set(new Uint16Array(c.buffer, c.byteOffset, c.byteLength / 2), at);
    at += c.byteLength / 2;
  }
  for (const w of [fast[0]!, other[0]!]) {
    const v = values(w);
    const i = whole.findIndex((x, j) => x === v[0] && whole[j + 1] === v[1] && whole[j + 2] === v[2] && whole[j + 3] === v[3]);
    assert.ok(i >= 0, 'a window of the shared stream');
    assert.deepEqual(whole.subarray(i, i + 64), v);
  }
});

test('CLI writes a loadable directory (and a GGUF file) and rejects bad arguments', async () => {
  const out = join(tempDir(), 'cli');
  const script = join(repoRoot(), 'dist', 'src', 'tools', 'make-test-model.js');
  const ok = spawnSync(process.execPath, [script, '--shape', 'tiny-llama', '--out', out, '--seed', '5', '--shards', '2'], { encoding: 'utf8' });
  assert.equal(ok.status, 0, ok.stderr);
  assert.match(ok.stdout, /tiny-llama, 21 tensors/);
  assert.equal(openShardedSafetensors(join(out, 'model.safetensors.index.json')).names().length, 21);
  const bad = spawnSync(process.execPath, [script, '--shape', 'gpt-9', '--out', out], { encoding: 'utf8' });
  assert.notEqual(bad.status, 0);
  assert.match(bad.stderr, /unknown shape "gpt-9"/);
  const int4 = spawnSync(process.execPath, [script, '--shape', 'tiny-qwen3-128', '--quantization', 'int4', '--out', out], { encoding: 'utf8' });
  assert.notEqual(int4.status, 0);
  assert.match(int4.stderr, /--quantization must be fp8, got int4/);
  const fp8 = spawnSync(process.execPath, [script, '--shape', 'tiny-qwen3-128', '--quantization', 'fp8', '--fast', '--out', join(out, 'fp8')], { encoding: 'utf8' });
  assert.equal(fp8.status, 0, fp8.stderr);
  assert.match(fp8.stdout, /tiny-qwen3-128, 38 tensors, .* MiB of bf16 and block-FP8 weights/);
  // --gguf: the same model as one GGUF file beside the directory, which loads as the directory's model
  const g = spawnSync(process.execPath, [script, '--shape', 'tiny-qwen3', '--gguf', 'q8_0', '--threads', '2', '--out',
    join(out, 'g')], { encoding: 'utf8' });
  assert.equal(g.status, 0, g.stderr);
  assert.match(g.stdout, /g\.q8_0\.gguf: the same weights as one q8_0 GGUF file, [\d.]+ s/);
  const { loadModel } = await import('../../src/loader/model-dir.js');
  const [fromGguf, fromDir] = [await loadModel(`${join(out, 'g')}.q8_0.gguf`), await loadModel(join(out, 'g'))];
  assert.deepEqual({ ...fromGguf.config, dtype: null }, { ...fromDir.config, dtype: null });
  const badGguf = spawnSync(process.execPath, [script, '--shape', 'tiny-qwen3', '--gguf', 'q3_k', '--out', join(out, 'h')], { encoding: 'utf8' });
  assert.notEqual(badGguf.status, 0);
  assert.match(badGguf.stderr, /--gguf must be one of f32, f16, bf16, q8_0, q4_0, q4_k_m, q5_k_m, q6_k, got q3_k/);
});

test('--quantization fp8: Qwen3-FP8\'s quantization_config, and the projections of the same seed\'s model quantized per block', async () => {
  const root = tempDir();
  const plain = await makeTestModel({ shape: 'tiny-qwen3-128', outDir: join(root, 'bf16'), seed: 3 });
  const fp8 = await makeTestModel({ shape: 'tiny-qwen3-128', outDir: join(root, 'fp8'), seed: 3, quantization: 'fp8' });
  assert.deepEqual(fp8.config.quantization_config, { activation_scheme: 'dynamic', fmt: 'e4m3', quant_method: 'fp8', weight_block_size: [128, 128] });
  assert.equal(fp8.config.torch_dtype, 'bfloat16');
  assert.deepEqual(parseModelConfig(fp8.config, 'config.json').quantization?.method, 'fp8');
  const a = openSafetensors(join(root, 'bf16', 'model.safetensors'));
  const b = openSafetensors(join(root, 'fp8', 'model.safetensors'));
  assert.equal(fp8.numTensors, plain.numTensors + 2 * 7);
  for (const name of a.names()) {
    if (!name.endsWith('_proj.weight')) {
      assert.deepEqual(b.read(name), a.read(name), name);
      continue;
    }
    const [N, K] = a.info(name).shape as [number, number];
    const { q, scaleInv } = quantizeWeightBlocks(bytesToF32('bf16', a.read(name).data), N, K);
    assert.deepEqual(b.info(name).dtype, 'f8_e4m3');
    assert.deepEqual(bytesToF32('f8_e4m3', b.read(name).data), q, name);
    assert.deepEqual(b.info(`${name}_scale_inv`), { dtype: 'f32', shape: [N / 128, K / 128], file: b.info(name).file });
    assert.deepEqual(bytesToF32('f32', b.read(`${name}_scale_inv`).data), scaleInv, `${name}_scale_inv`);
  }
  await assert.rejects(makeTestModel({ shape: 'tiny-qwen3', outDir: join(root, 'no'), quantization: 'fp8' }),
    /shape tiny-qwen3: --quantization fp8 needs every projection dimension a multiple of 128; hidden_size is 64/);
});

test('--quantization fp8 --fast: e4m3 codes never NaN, one scale for all blocks, the weights\' std that of the bf16 init', async () => {
  const dir = join(tempDir(), 'fast');
  await makeTestModel({ shape: 'tiny-qwen3-128', outDir: dir, quantization: 'fp8', repeatChunks: true, seed: 1 });
  const w = openSafetensors(join(dir, 'model.safetensors'));
  const name = 'model.layers.1.mlp.gate_proj.weight';
  const codes = w.read(name).data;
  assert.ok(codes.every((c) => (c & 0x7f) !== 0x7f), 'no NaN code');
  const scales = new Set(bytesToF32('f32', w.read(`${name}_scale_inv`).data));
  assert.equal(scales.size, 1);
  const values = bytesToF32('f8_e4m3', codes).map((v) => v * [...scales][0]!);
  const { mean, std } = stats(values);
  assert.ok(Math.abs(mean) < 0.002 && Math.abs(std - 0.02) < 0.002, JSON.stringify({ mean, std }));
  assert.ok(new Set(codes).size > 100, 'codes are varied');
  const specs = tensorSpecsForConfig({ ...testModelShapes()['qwen3-8b']!, quantization_config: FP8_QUANTIZATION_CONFIG }, 'bf16');
  const names = specs.map((s) => s.name);
  assert.equal(names[names.indexOf('model.layers.35.self_attn.o_proj.weight') + 1], 'model.layers.35.self_attn.o_proj.weight_scale_inv');
  assert.deepEqual(specs.find((s) => s.name === 'model.layers.35.mlp.down_proj.weight_scale_inv')?.shape, [32, 96]);
});

test('the GGUF converter\'s worker threads write the serial converter\'s bytes (llama: q/k permuted; Q4_K_M\'s mix; ' +
  'tensors split by rows)',
  async () => {
    const { modelDirToGguf, modelDirToGgufParallel } = await import('../../src/tools/gguf-convert.js');
    const dir = join(tempDir(), 'convert');
    await makeTestModel({ shape: 'tiny-llama', outDir: dir, dtype: 'bf16', seed: 3 });
    for (const q of ['q4_k_m', 'q8_0'] as const) {
      modelDirToGguf(dir, join(dir, `serial.${q}.gguf`), q);
      // tasks of at most 5000 elements: every tensor but the (permuted) q and k split by rows, unevenly
      await modelDirToGgufParallel(dir, join(dir, `threads.${q}.gguf`), q, 3, 5000);
      const serial = readFileSync(join(dir, `serial.${q}.gguf`));
      assert.ok(serial.length > 100_000, `${serial.length} bytes`);
      assert.ok(readFileSync(join(dir, `threads.${q}.gguf`)).equals(serial), q);
    }
    // and the script form, on a directory made before
    const script = join(repoRoot(), 'dist', 'src', 'tools', 'gguf-convert.js');
    const r = spawnSync(process.execPath, [script, dir, join(dir, 'cli.gguf'), 'q4_k_m', '2'], { encoding: 'utf8' });
    assert.equal(r.status, 0, r.stderr);
    assert.match(r.stdout, /cli\.gguf: .* as q4_k_m, [\d.]+ s/);
    assert.ok(readFileSync(join(dir, 'cli.gguf')).equals(readFileSync(join(dir, 'serial.q4_k_m.gguf'))));
  });
