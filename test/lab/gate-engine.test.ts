// quire gate's transcript gate on the real engine: passes unchanged, catches a
// planted change of one logit (a logit bias on one token id).

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { llmGenerator } from '../../src/cli/gate.js';
import { LLM } from '../../src/engine/llm.js';
import { runTranscriptGate, type Generator } from '../../src/lab/index.js';
import { makeTestModel } from '../../src/tools/make-test-model.js';

test('the transcript gate passes an unchanged engine and catches one perturbed logit', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'quire-gate-'));
  await makeTestModel({ shape: 'tiny-llama', outDir: join(dir, 'model'), dtype: 'f32', seed: 0 });
  const llm = new LLM(join(dir, 'model'), { backend: 'cpu', cpuThreads: 1 });
  try {
    const prompts = { maxTokens: 12, prompts: [{ id: 'a', prompt: 'Once upon a time' }, { id: 'b', prompt: [5, 6, 7, 8, 9] }] };
    const canonicalPath = join(dir, 'canonical.json');
    const gen = llmGenerator(llm);
    const recorded = await runTranscriptGate({ generator: gen, prompts, pathKey: 'cpu-f32', canonicalPath, mode: 'record' });
    const again = await runTranscriptGate({ generator: gen, prompts, pathKey: 'cpu-f32', canonicalPath, mode: 'check' });
    assert.equal(again.passed, true);
    assert.equal(again.md5, recorded.md5);

    // Plant: raise the runner-up's logit at step 3 of prompt b just past the winner's.
    const [b] = await llm.generate([[5, 6, 7, 8, 9]], { maxTokens: 12, temperature: 0, ignoreEos: true, logprobs: 5 });
    const step = 3;
    const runnerUp = b!.logprobs![step]!.top.find((t) => t.tokenId !== b!.tokenIds[step])!;
    const margin = b!.logprobs![step]!.logprob - runnerUp.logprob;
    const planted: Generator = {
      async generate(ps, maxTokens) {
        const out = [];
        for (const p of ps) {
          const isB = Array.isArray(p);
          const [c] = await llm.generate([p], { maxTokens, temperature: 0, ignoreEos: true,
            ...(isB ? { logitBias: { [runnerUp.tokenId]: margin + 1e-3 } } : {}) });
          out.push({ tokenIds: c!.tokenIds, text: c!.text });
        }
        return out;
      },
    };
    const caught = await runTranscriptGate({ generator: planted, prompts, pathKey: 'cpu-f32', canonicalPath, mode: 'check' });
    assert.equal(caught.passed, false);
    assert.deepEqual(caught.mismatches.map((m) => m.promptId), ['b']);
    assert.ok(caught.mismatches[0]!.index <= step, `first difference at ${caught.mismatches[0]!.index}`);
  } finally {
    await llm.close();
    rmSync(dir, { recursive: true, force: true });
  }
});

// the lossy paths recorded for the demo model: an FP8 KV cache, and weights quantized to block FP8 at load
for (const [what, lossy] of [['FP8-cache path (cpu-f32-fp8kv)', { kvCacheDtype: 'fp8_e4m3' }],
  ['FP8-weights path (cpu-f32-fp8w)', { quantization: 'fp8' }]] as const) {
  test(`the demo model's recorded ${what} is what the CPU engine gives so`, async () => {
    const { packageRoot } = await import('../../src/cli/default-model.js');
    const { gatePathKey } = await import('../../src/cli/gate.js');
    const { loadGatePrompts } = await import('../../src/lab/index.js');
    const root = packageRoot();
    const llm = new LLM(join(root, 'models', 'quire-demo'), { backend: 'cpu', cpuThreads: 1, ...lossy });
    try {
      const pathKey = gatePathKey('cpu', { enforceEager: false, batchInvariant: false, ...lossy });
      const r = await runTranscriptGate({ generator: llmGenerator(llm), prompts: loadGatePrompts(join(root, 'bench', 'gate-prompts.json')),
        pathKey, canonicalPath: join(root, 'bench', 'gates', 'quire-demo.json'), mode: 'check' });
      assert.equal(r.passed, true, `mismatches: ${JSON.stringify(r.mismatches.slice(0, 2))}`);
      assert.notEqual(r.md5, 'dc8890fd09ace5ccd3a71f35cfb31278', 'not the f32 transcript');
    } finally {
      await llm.close();
    }
  });
}

// a mixture of experts, a hybrid (gated DeltaNet + gated attention) and a hybrid with experts and a shared expert
// (make-test-model --shape <name>, seed 0): each recorded transcript is the CPU engine's
for (const shape of ['tiny-qwen3-moe', 'tiny-qwen3.5', 'tiny-qwen3-next']) {
  test(`the ${shape} test model's recorded cpu-f32 transcript (bench/gates/${shape}.json) is what the CPU engine gives`, async () => {
    const { packageRoot } = await import('../../src/cli/default-model.js');
    const { loadGatePrompts } = await import('../../src/lab/index.js');
    const root = packageRoot();
    const dir = mkdtempSync(join(tmpdir(), 'quire-gate-model-'));
    await makeTestModel({ shape, outDir: dir, dtype: 'bf16', seed: 0 });
    const llm = new LLM(dir, { backend: 'cpu', cpuThreads: 1 });
    try {
      const r = await runTranscriptGate({ generator: llmGenerator(llm), prompts: loadGatePrompts(join(root, 'bench', 'gate-prompts.json')),
        pathKey: 'cpu-f32', canonicalPath: join(root, 'bench', 'gates', `${shape}.json`), mode: 'check' });
      assert.equal(r.passed, true, `mismatches: ${JSON.stringify(r.mismatches.slice(0, 2))}`);
    } finally {
      await llm.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
}
