// The CPU backend against Hugging Face transformers (float32) on the same
// weights: fixtures written by tools/reference/reference_logits.py on the GPU
// host from the models make-test-model writes (see each fixture's generated_by). A shape whose fixture is not yet
// committed is skipped, saying how to produce it. A hybrid model's sequence keeps its recurrent state in slot 0.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CpuBackend } from '../../src/backend/cpu/cpu-backend.js';
import { buildForwardBatch } from '../../src/engine/batch-builder.js';
import { loadModelDir } from '../../src/loader/model-dir.js';
import { Model } from '../../src/model/model.js';
import { makeTestModel } from '../../src/tools/make-test-model.js';

interface Fixture {
  prompts: { prompt: number[]; greedy: number[]; steps: { position: number; logits: number[] }[] }[];
}

const BLOCK_SIZE = 16;

/** How the GPU host writes a fixture (torch and transformers 5.x there; the model written here first). */
function fixtureCommand(shape: string): string {
  return `node dist/src/cli/main.js make-test-model --shape ${shape} --dtype f32 --seed 0 --out /tmp/${shape} && ` +
    `/opt/torch/.venv/bin/python tools/reference/reference_logits.py /tmp/${shape} test/fixtures/reference/${shape}.json`;
}

for (const shape of ['tiny-qwen3', 'tiny-llama', 'tiny-qwen2', 'tiny-mistral', 'tiny-llama-bias', 'tiny-qwen3-yarn',
  'tiny-llama-linear', 'tiny-phi3', 'tiny-qwen3-moe', 'tiny-mixtral', 'tiny-qwen3.5', 'tiny-qwen3.5-moe', 'tiny-qwen3-next']) {
  const file = join('test', 'fixtures', 'reference', `${shape}.json`);
  const skip = existsSync(file) ? false : `no ${file} yet: on the GPU host, ${fixtureCommand(shape)}`;
  test(`${shape}: logits and greedy tokens match transformers`, { skip }, async (t) => {
    const fixture = JSON.parse(readFileSync(file, 'utf8')) as Fixture;
    const dir = mkdtempSync(join(tmpdir(), `quire-ref-${shape}-`));
    try {
      await makeTestModel({ shape, outDir: dir, dtype: 'f32', seed: 0 });
      const md = loadModelDir(dir);
      const backend = new CpuBackend({ kvCacheBytes: 1 << 24, numThreads: 1 });
      const model = Model.load(md.config, md.weights, backend);
      backend.allocateKvCache(model.kvCacheSpec(64, BLOCK_SIZE));
      const recurrent = model.recurrentStateLayout(1);
      if (recurrent) backend.allocateRecurrentState(recurrent);
      const vocab = md.config.vocabSize;
      let worstRel = 0;
      for (const p of fixture.prompts) {
        const blockTable = [1, 2, 3, 4];
        const seq = [...p.prompt];
        const greedy: number[] = [];
        let fed = 0;
        for (let k = 0; k < p.greedy.length; k++) {
          const batch = buildForwardBatch([{ tokenIds: seq.slice(fed), startPosition: fed, blockTable, sample: true }], BLOCK_SIZE);
          if (recurrent) batch.stateSlots = new Int32Array([0]);
          fed = seq.length;
          const logits = model.forward(batch);
          assert.equal(logits.length, vocab);
          const ref = p.steps[k];
          if (ref) {
            assert.equal(ref.position, seq.length);
            let scale = 0;
            let maxErr = 0;
            for (let i = 0; i < vocab; i++) {
              scale = Math.max(scale, Math.abs(ref.logits[i]!));
              maxErr = Math.max(maxErr, Math.abs(logits[i]! - ref.logits[i]!));
            }
            worstRel = Math.max(worstRel, maxErr / scale);
          }
          let best = 0;
          for (let i = 1; i < vocab; i++) if (logits[i]! > logits[best]!) best = i;
          greedy.push(best);
          seq.push(best);
        }
        assert.deepEqual(greedy, p.greedy, `greedy tokens of prompt [${p.prompt.slice(0, 4).join(', ')}, ...]`);
      }
      t.diagnostic(`max relative logit error ${worstRel.toExponential(2)}`);
      assert.ok(worstRel < 1e-4, `max abs logit error relative to the logit scale: ${worstRel}`);
      backend.dispose();
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
}
