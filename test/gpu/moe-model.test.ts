// Mixtures of experts on CUDA, whole model: logits against the CPU backend (Qwen3-MoE with a dense layer among its
// sparse ones, Mixtral's layout), and greedy transcripts of the MoE test model that do not depend on batch size,
// CUDA graphs or chunking, in the default and the batch-invariant mode (md5 per path logged).

import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { LLM } from '../../src/engine/llm.js';
import { makeTestModel } from '../../src/tools/make-test-model.js';
import { tinyConfig } from '../../src/model/random-weights.js';
import { transcriptMd5 } from '../../src/lab/gate-transcript.js';
import { packageRoot } from '../../src/cli/default-model.js';
import { assertBf16Close, newCpu, newCuda, noCuda, prefillAndDecode } from './cuda-helpers.js';
import type { Backend } from '../../src/backend/backend.js';
import type { ModelConfig } from '../../src/loader/types.js';

describe('mixture of experts on CUDA', { skip: noCuda }, () => {
  const backends: Backend[] = [];
  const root = mkdtempSync(join(tmpdir(), 'quire-gpu-moe-'));
  before(async () => {
    // head_dim 64 (the CUDA attention's smallest); tiny-qwen3-moe's 16 runs on the CPU only
    await makeTestModel({ shape: 'tiny-qwen3-moe-128', outDir: join(root, 'tiny-qwen3-moe-128'), dtype: 'bf16', seed: 0 });
  });
  after(() => {
    backends.forEach((b) => b.dispose());
    rmSync(root, { recursive: true, force: true });
  });

  const moe = (numExperts: number, topK: number, sparseLayers: boolean[], renormalize: boolean): ModelConfig['moe'] =>
    ({ numExperts, topK, expertIntermediateSize: 128, renormalize, sparseLayers });
  for (const [name, arch, route] of [
    ['qwen3_moe, 16 experts top 4, layer 1 dense', 'qwen3', moe(16, 4, [true, false, true], false)],
    ['mixtral, 8 experts top 2', 'llama', moe(8, 2, [true, true, true], true)],
  ] as const) {
    test(`${name}: prefill and decode logits match the CPU backend`, () => {
      const config: ModelConfig = { ...tinyConfig(arch, { hiddenSize: 256, intermediateSize: 512, numLayers: 3, numHeads: 4,
        numKvHeads: 2, headDim: 64, vocabSize: 500 }), architecture: arch === 'qwen3' ? 'qwen3_moe' : 'mixtral', moe: route };
      const run = (backend: Backend) => {
        backends.push(backend);
        return prefillAndDecode(config, backend, 5).out;
      };
      const expected = run(newCpu());
      const actual = run(newCuda());
      // A row whose router had a near-tie may pick another expert on bf16 activations than on the CPU's f32 ones
      // (then its logits differ by that expert's output): at most one of the 8 rows (2 sequences, 4 steps) may.
      const vocab = config.vocabSize;
      const off: string[] = [];
      actual.forEach((logits, i) => {
        for (let r = 0; r < logits.length / vocab; r++) {
          try {
            assertBf16Close(logits.subarray(r * vocab, (r + 1) * vocab), expected[i]!.subarray(r * vocab, (r + 1) * vocab),
              `${name} step ${i} row ${r}`, 0.05);
          } catch (err) {
            off.push((err as Error).message);
          }
        }
      });
      if (off.length > 0) console.log(`# ${off.join('; ')}`);
      assert.ok(off.length <= 1, off.join('; '));
    });
  }

  for (const batchInvariant of [false, true]) {
    test(`test model${batchInvariant ? ', batch-invariant mode' : ''}: greedy transcripts identical alone, in batches (and chunked: batch-invariant), eager and graphed`, async () => {
      const gate = JSON.parse(readFileSync(join(packageRoot(), 'bench', 'gate-prompts.json'), 'utf8')) as
        { maxTokens: number; prompts: { prompt: string }[] };
      const prompts = Array.from({ length: 64 }, (_, i) => `${gate.prompts[i % gate.prompts.length]!.prompt}${i < 8 ? '' : ` ${i}`}`);
      const paths: Record<string, { maxNumSeqs: number; enforceEager: boolean; maxNumBatchedTokens: number }> = {
        'graphs, batch 64': { maxNumSeqs: 64, enforceEager: false, maxNumBatchedTokens: 2048 },
        // chunks sharing steps with decode rows: only the batch-invariant mode promises the same bits for them
        ...(batchInvariant ? { 'graphs, batch 16, 24-token steps': { maxNumSeqs: 16, enforceEager: false, maxNumBatchedTokens: 24 } } : {}),
        'graphs, batch 16': { maxNumSeqs: 16, enforceEager: false, maxNumBatchedTokens: 2048 },
        'eager, batch 64': { maxNumSeqs: 64, enforceEager: true, maxNumBatchedTokens: 2048 },
        'graphs, one at a time': { maxNumSeqs: 1, enforceEager: false, maxNumBatchedTokens: 2048 },
      };
      let reference: number[][] | null = null;
      for (const [name, p] of Object.entries(paths)) {
        // a small cache: the GPU suite runs two files at once, and model.test's engines take 0.9 of the memory
        const llm = new LLM(join(root, 'tiny-qwen3-moe-128'), { backend: 'cuda', batchInvariant, maxModelLen: 512, gpuMemoryUtilization: 0.3,
          kvCacheBytes: 256 << 20, ...p });
        try {
          const out = await llm.generate(prompts, { maxTokens: gate.maxTokens, temperature: 0, ignoreEos: true });
          const t = out.map((c) => c.tokenIds);
          console.log(`# transcript md5 ${transcriptMd5(t)} (gate prompts ${transcriptMd5(t.slice(0, 8))})  ` +
            `tiny-qwen3-moe-128 cuda-bf16${batchInvariant ? ' batch-invariant' : ''} ${name}`);
          reference ??= t;
          assert.deepEqual(t, reference, name);
        } finally {
          await llm.close();
        }
      }
    });
  }
});
