// bench/gates/thresholds.json's GGUF entries (cpu-f32-<file type>) against a reference of the unquantized model: the
// demo model's Q8_0 file passes its own entry, and its Q4_0 file, whose loss is larger, fails the Q8_0 entry (so the
// entries tell formats apart). The reference is Quire's CPU f32 run of the safetensors model, which matches
// transformers' to ~1e-6 (test/model/reference.test.ts).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadReferenceFile, referenceGate } from '../../src/cli/gate.js';
import { packageRoot } from '../../src/cli/default-model.js';
import { LLM } from '../../src/engine/llm.js';
import type { ReferenceThresholds } from '../../src/lab/gate-reference.js';
import { defaultModelDir } from '../../src/loader/default-model.js';
import { modelDirToGguf } from '../../src/tools/gguf-convert.js';

test('GGUF thresholds: the demo model\'s Q8_0 passes cpu-f32-q8_0, its Q4_0 does not', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'quire-gate-gguf-'));
  const opts = { backend: 'cpu' as const, cpuThreads: 1 };
  const thresholds = JSON.parse(readFileSync(join(packageRoot(), 'bench', 'gates', 'thresholds.json'), 'utf8')) as Record<string, ReferenceThresholds>;
  try {
    const ref = new LLM(defaultModelDir(), opts);
    const d = await ref.ready();
    const prompts = [];
    for (const [id, text] of [['story', 'Once upon a time, in a village at the edge of a forest,'], ['count', '1, 2, 3, 4, 5,']]) {
      const ids = d.tokenizer.encode(text!, { addSpecialTokens: true });
      const [c] = await ref.generate([ids], { maxTokens: 16, temperature: 0, logprobs: 20, ignoreEos: true });
      prompts.push({ id, prompt: ids, greedy: c!.tokenIds, steps: c!.logprobs!.map((l, k) => ({ position: ids.length + k, top: l.top })) });
    }
    await ref.close();
    const refFile = join(dir, 'ref.json');
    writeFileSync(refFile, JSON.stringify({ prompts }));
    const gate = async (q: 'q8_0' | 'q4_0'): Promise<{ passed: boolean; detail: string }> => {
      const file = join(dir, `demo.${q}.gguf`);
      modelDirToGguf(defaultModelDir(), file, q);
      const llm = new LLM(file, opts);
      try {
        return await referenceGate(llm, loadReferenceFile(refFile), 'cpu-f32-q8_0', thresholds);
      } finally {
        await llm.close();
      }
    };
    const q8 = await gate('q8_0');
    assert.equal(q8.passed, true, q8.detail);
    const q4 = await gate('q4_0');
    assert.equal(q4.passed, false, q4.detail);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
