// A mixture of experts from a GGUF file on CUDA (llama.cpp's qwen3moe: experts stacked [E, rows, cols], each
// expert's slab dequantized at load, as the MoE kernels take bf16 experts) against the CPU backend on the same file:
// the CPU's greedy transcripts, scored teacher-forced on both backends, within bf16's logprob difference.
//   npm run build && node scripts/run-tests.mjs --gpu gguf-moe

import { after, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { LLM } from '../../src/engine/llm.js';
import type { EngineOptions } from '../../src/engine/options.js';
import { makeTestModel } from '../../src/tools/make-test-model.js';
import { modelDirToGguf } from '../../src/tools/gguf-convert.js';
import { noCuda } from './cuda-helpers.js';

const root = mkdtempSync(join(tmpdir(), 'quire-gguf-moe-'));
after(() => rmSync(root, { recursive: true, force: true }));

async function withLlm<R>(file: string, o: Partial<EngineOptions>, fn: (llm: LLM) => Promise<R>): Promise<R> {
  const llm = new LLM(file, { maxModelLen: 256, maxNumSeqs: 4, kvCacheBytes: 32 << 20, ...o });
  try {
    return await fn(llm);
  } finally {
    await llm.close();
  }
}

test('a qwen3moe Q8_0 GGUF on CUDA scores the CPU backend\'s greedy transcripts as the CPU does', { skip: noCuda }, async () => {
  const dir = join(root, 'm');
  await makeTestModel({ shape: 'tiny-qwen3-moe-all-128', outDir: dir, dtype: 'bf16', seed: 4 });
  const file = join(root, 'm.q8_0.gguf');
  modelDirToGguf(dir, file, 'q8_0');
  const prompts = [[5, 17, 99, 3, 42, 7], [11, 12, 13, 14], [200, 1, 300, 2, 400, 3, 9]];
  const score = (llm: LLM, seqs: number[][]) => llm.generate(seqs, { maxTokens: 1, temperature: 0, promptLogprobs: 0 })
    .then((out) => out.map((c) => c.promptLogprobs!.slice(1).map((l) => l!.logprob)));
  const { seqs, cpu } = await withLlm(file, { backend: 'cpu' }, async (llm) => {
    const out = await llm.generate(prompts, { maxTokens: 24, temperature: 0, ignoreEos: true });
    const s = out.map((c) => [...c.promptTokenIds, ...c.tokenIds]);
    return { seqs: s, cpu: await score(llm, s) };
  });
  const cuda = await withLlm(file, { backend: 'cuda' }, (llm) => score(llm, seqs));
  const diffs = cpu.flatMap((row, i) => row.map((lp, k) => Math.abs(lp - cuda[i]![k]!)));
  const mean = diffs.reduce((a, d) => a + d, 0) / diffs.length;
  console.log(`# mean |logprob difference| ${mean.toFixed(4)}, worst ${Math.max(...diffs).toFixed(4)} over ${diffs.length} tokens`);
  // bf16 activations and weights against f32: a few hundredths on average (a wrong expert slab: whole nats)
  assert.ok(mean < 0.05, `mean ${mean}`);
});
