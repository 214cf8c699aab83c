// The raw-block path of a GGUF file's weights (WeightSource.readGgufBlocks, what the CUDA backend keeps quantized):
// llama.cpp's q/k permutation undone on whole rows of blocks, and blocks that dequantize to exactly the values read()
// gives (the CPU backend's reference path), projection by projection, through files of mixed block types.

import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { defaultModelDir } from '../../src/loader/default-model.js';
import { dequantize, GGML_TYPES } from '../../src/loader/gguf-quants.js';
import { unpermuteQk, unpermuteQkRows } from '../../src/loader/gguf-weights.js';
import { loadModel } from '../../src/loader/model-dir.js';
import type { GgufBlockType } from '../../src/loader/types.js';
import { makeTestModel } from '../../src/tools/make-test-model.js';
import { modelDirToGguf, type GgufQuantization } from '../../src/tools/gguf-convert.js';
import { randomGgufBlocks } from '../backend/gguf-helpers.js';

const root = mkdtempSync(join(tmpdir(), 'quire-gguf-blocks-'));
after(() => rmSync(root, { recursive: true, force: true }));

for (const type of ['Q8_0', 'Q4_0', 'Q4_K', 'Q5_K', 'Q6_K'] as GgufBlockType[]) {
  test(`${type}: the q/k permutation undone on rows of blocks equals it undone on the dequantized rows`, () => {
    const [headDim, rows, K] = [8, 24, 512];
    const blocks = randomGgufBlocks(type, rows, K, 3);
    const rowBytes = (K / GGML_TYPES[type].blockElems) * GGML_TYPES[type].blockBytes;
    const moved = unpermuteQkRows(blocks, rows, rowBytes, headDim);
    const want = unpermuteQk(dequantize(type, blocks, rows * K), rows, K, headDim);
    assert.deepEqual(dequantize(type, moved, rows * K), want);
    assert.notDeepEqual(moved, blocks, 'rows moved');
  });
}

const PROJECTION = /(_proj|lm_head)\.weight$/;

async function checkBlocks(path: string, wantTypes: Set<string>): Promise<void> {
  const { weights } = await loadModel(path);
  const seen = new Set<string>();
  for (const name of weights.names()) {
    const blocks = weights.readGgufBlocks!(name);
    const t = weights.read(name);
    if (!PROJECTION.test(name) && t.shape.length === 1) assert.equal(blocks, null, `${name} is not blocks`);
    if (blocks === null) continue;
    seen.add(blocks.type);
    assert.deepEqual(blocks.shape, t.shape, name);
    const numElements = t.shape[0]! * t.shape[1]!;
    assert.deepEqual(dequantize(blocks.type, blocks.data, numElements), new Float32Array(t.data.buffer), name);
  }
  assert.deepEqual([...seen].sort(), [...wantTypes].sort());
}

test('tiny-llama as a q8_0 GGUF: every projection\'s blocks (q and k unpermuted, lm_head) dequantize to read()\'s values',
  async () => {
    const dir = join(root, 'tiny-llama');
    await makeTestModel({ shape: 'tiny-llama', outDir: dir, dtype: 'f32', seed: 4 });
    modelDirToGguf(dir, join(dir, 'q8_0.gguf'), 'q8_0');
    await checkBlocks(join(dir, 'q8_0.gguf'), new Set(['Q8_0']));
  });

for (const [q, types] of [['q4_k_m', ['Q4_K', 'Q6_K']], ['q5_k_m', ['Q5_K', 'Q6_K']], ['q4_0', ['Q4_0']], ['q6_k', ['Q6_K']]] as
  [GgufQuantization, string[]][]) {
  test(`the demo model as a ${q} GGUF: blocks of ${types.join(' and ')} that dequantize to read()'s values`, async () => {
    const file = join(root, `demo-${q}.gguf`);
    modelDirToGguf(defaultModelDir(), file, q);
    await checkBlocks(file, new Set(types));
  });
}

test('an f16 GGUF has no blocks to hand out', async () => {
  const file = join(root, 'demo-f16.gguf');
  modelDirToGguf(defaultModelDir(), file, 'f16');
  const { weights } = await loadModel(file);
  assert.equal(weights.readGgufBlocks!('model.layers.0.self_attn.q_proj.weight'), null);
});
