// The engine on a block-FP8 checkpoint (make-test-model --quantization fp8, CPU backend): text generated end to end,
// the same greedy tokens alone or batched, and the weight bytes a step reads counted at FP8's byte an element.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { LLM } from '../../src/engine/llm.js';
import { makeTestModel } from '../../src/tools/make-test-model.js';

let dir = '';
before(async () => {
  dir = mkdtempSync(join(tmpdir(), 'quire-fp8w-'));
  await makeTestModel({ shape: 'tiny-qwen3-128', outDir: dir, seed: 5, quantization: 'fp8' });
});
after(() => rmSync(dir, { recursive: true, force: true }));

test('the engine generates from a block-FP8 model: the same greedy tokens alone or batched', async () => {
  const llm = new LLM(dir, { backend: 'cpu', cpuThreads: 1 });
  try {
    const prompts = [[5, 9, 11, 40, 3, 77, 12, 8, 150], 'a prompt as text'];
    const greedy = { maxTokens: 8, temperature: 0, ignoreEos: true };
    const batched = await llm.generate(prompts, greedy);
    const alone = [...await llm.generate(prompts[0]!, greedy), ...await llm.generate(prompts[1]!, greedy)];
    assert.deepEqual(batched.map((c) => c.tokenIds), alone.map((c) => c.tokenIds));
    for (const c of batched) assert.equal(c.tokenIds.length, 8);
    assert.ok(batched[1]!.text.length > 0);
    // per layer: qkv [512, 128], o [128, 256], gate_up [512, 128], down [128, 256] at a byte an element, 12 f32
    // scales; the norms and the (tied) head in the CPU backend's f32
    const fp8 = 2 * (2 * (512 * 128 + 128 * 256) + 12 * 4);
    const f32 = 4 * (2 * (2 * 128 + 2 * 64) + 128 + 512 * 128);
    assert.equal(llm.engineInfo().weightBytesPerStep, fp8 + f32);
  } finally {
    await llm.close();
  }
});
