// A GGUF model on CUDA with its projections kept as llama.cpp's blocks, against the same file dequantized to bf16 at
// load (QUIRE_GGUF_BLOCKS=0): the demo model as Q4_K_M (Q4_K projections, Q6_K v and down: fused qkv of two formats)
// and as Q8_0, through the engine (prefill chunks on the dequantized path, decode steps on the GEMV, CUDA graphs).
// The two paths differ by the GEMV's q8 activations (kernels/gguf_q8.cuh, as llama.cpp's) and the bf16 rounding of
// the weights it does without, so each scores the other's greedy transcript within a small logprob difference, and
// most transcripts agree. The CPU backend with its matmul inputs quantized so (a session-33 experiment) scored the
// unquantized path's transcripts at most 0.057 (Q4_K_M) and 0.042 (Q8_0) away, 7 and 8 of 8 transcripts identical.

import { after, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { LLM } from '../../src/engine/llm.js';
import { packageRoot } from '../../src/cli/default-model.js';
import { modelDirToGguf, type GgufQuantization } from '../../src/tools/gguf-convert.js';
import { noCuda } from './cuda-helpers.js';

describe('GGUF models on CUDA, blocks kept quantized', { skip: noCuda }, () => {
  const root = mkdtempSync(join(tmpdir(), 'quire-gguf-cuda-'));
  after(() => rmSync(root, { recursive: true, force: true }));
  const gate = JSON.parse(readFileSync(join(packageRoot(), 'bench', 'gate-prompts.json'), 'utf8')) as
    { prompts: { prompt: string }[] };
  const prompts = gate.prompts.slice(0, 8).map((p) => p.prompt);
  const maxTokens = 32;

  async function withLlm<R>(file: string, blocks: boolean, fn: (llm: LLM) => Promise<R>, extra = {}): Promise<R> {
    if (!blocks) process.env.QUIRE_GGUF_BLOCKS = '0';
    try {
      // a budget of its own (8 sequences of 512 tokens take 256 pages of 40 KiB): beside another test file's engine,
      // which may have allocated since this one started, --gpu-memory-utilization's share can be nothing
      const llm = new LLM(file, { backend: 'cuda', maxModelLen: 512, maxNumSeqs: 8, kvCacheBytes: 64 << 20, ...extra });
      try {
        return await fn(llm);
      } finally {
        await llm.close();
      }
    } finally {
      delete process.env.QUIRE_GGUF_BLOCKS;
    }
  }

  for (const q of ['q4_k_m', 'q8_0'] as GgufQuantization[]) {
    test(`the demo model as ${q}: greedy transcripts and their logprobs near the dequantized bf16 path's`, async () => {
      const file = join(root, `demo-${q}.gguf`);
      modelDirToGguf(join(packageRoot(), 'models', 'quire-demo'), file, q);
      const params = { maxTokens, temperature: 0, ignoreEos: true, logprobs: 0 };
      const quantized = await withLlm(file, true, (llm) => llm.generate(prompts, params));
      const bf16 = await withLlm(file, false, (llm) => llm.generate(prompts, params));
      // the quantized path scores the bf16 path's transcripts (teacher-forced: one divergence does not compound), in
      // chunks of 8 tokens, so on the GEMV as decode steps are (longer chunks take the dequantized weights)
      const scored = await withLlm(file, true, (llm) => llm.generate(bf16.map((b) => [...b.promptTokenIds, ...b.tokenIds]),
        { maxTokens: 1, temperature: 0, promptLogprobs: 0 }), { maxNumBatchedTokens: 8 });
      let worst = 0;
      let numSame = 0;
      for (let i = 0; i < prompts.length; i++) {
        const [a, b] = [quantized[i]!, bf16[i]!];
        const same = a.tokenIds.findIndex((t, k) => t !== b.tokenIds[k]);
        console.log(`# ${q} prompt ${i}: transcripts agree on ${same === -1 ? maxTokens : same} of ${maxTokens} tokens`);
        if (same === -1) numSame++;
        b.logprobs!.forEach((lp, k) => {
          const s = scored[i]!.promptLogprobs![b.promptTokenIds.length + k]!;
          worst = Math.max(worst, Math.abs(s.logprob - lp.logprob));
        });
      }
      console.log(`# ${q}: largest logprob difference ${worst.toFixed(4)}, ${numSame} of ${prompts.length} transcripts identical`);
      assert.ok(worst < 0.1, `the quantized path scores the bf16 transcript ${worst} away`);
      assert.ok(numSame >= prompts.length / 2, `${numSame} of ${prompts.length} transcripts identical`);
    });
  }
});
