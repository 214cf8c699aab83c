// The CPU backend's EAGLE-3 head against torch and transformers (tools/reference/eagle3_reference.py: the target in
// transformers, the head written out in torch from vLLM's llama_eagle3.py), float32, on the same weights: a fixture the
// GPU host writes from the models make-test-model writes. Skipped, saying how to produce it, until it is committed.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CpuBackend } from '../../src/backend/cpu/cpu-backend.js';
import { buildForwardBatch } from '../../src/engine/batch-builder.js';
import { loadEagle3HeadDir } from '../../src/loader/eagle3-head.js';
import { loadModelDir } from '../../src/loader/model-dir.js';
import { Model } from '../../src/model/model.js';
import { makeTestModel } from '../../src/tools/make-test-model.js';
import { makeTestEagle3Head } from '../../src/tools/test-model/eagle3.js';

interface Fixture {
  aux_layers: number[];
  prompts: { prompt: number[]; catch_up: { position: number; logits: number[] }[]; chained: { proposal: number; position: number;
    logits: number[] }; proposal: number }[];
}

const FILE = join('test', 'fixtures', 'reference', 'eagle3-tiny-llama-8l.json');
const COMMAND = 'node dist/src/cli/main.js make-test-model --shape tiny-llama-8l --dtype f32 --seed 0 --out /tmp/tiny-llama-8l && ' +
  'node dist/src/cli/main.js make-test-model --eagle3-head-for /tmp/tiny-llama-8l --draft-vocab-size 384 --dtype f32 --seed 1 ' +
  '--out /tmp/tiny-llama-8l-eagle3 && /opt/torch/.venv/bin/python tools/reference/eagle3_reference.py /tmp/tiny-llama-8l ' +
  `/tmp/tiny-llama-8l-eagle3 ${FILE}`;

test('the EAGLE-3 head\'s catch-up and chained logits and its proposal match torch', { skip: existsSync(FILE) ? false : `no ${FILE} yet: on the GPU host, ${COMMAND}` }, async () => {
  const fixture = JSON.parse(readFileSync(FILE, 'utf8')) as Fixture;
  const dir = mkdtempSync(join(tmpdir(), 'quire-eagle3-ref-'));
  const backend = new CpuBackend({ kvCacheBytes: 1 << 24, numThreads: 1 });
  try {
    await makeTestModel({ shape: 'tiny-llama-8l', outDir: join(dir, 't'), dtype: 'f32', seed: 0 });
    makeTestEagle3Head({ target: join(dir, 't'), outDir: join(dir, 'h'), draftVocabSize: 384, dtype: 'f32', seed: 1 });
    const md = loadModelDir(join(dir, 't'));
    const head = loadEagle3HeadDir(join(dir, 'h'));
    const model = Model.load(md.config, md.weights, backend, { eagle3: head });
    assert.deepEqual(model.parts.eagle3!.parts.auxLayers, fixture.aux_layers);
    model.allocateEagle3Carry(64);
    backend.allocateKvCache(model.kvCacheSpec(8, 16));
    const V = head.draftVocabSize;
    const blockTable = [1, 2];
    let worst = 0;
    const compare = (got: Float32Array, want: number[]) => {
      const scale = Math.max(1e-3, ...want.map(Math.abs));
      want.forEach((v, i) => { worst = Math.max(worst, Math.abs(got[i]! - v) / scale); });
    };
    for (const p of fixture.prompts) {
      const n = p.prompt.length;
      model.forward(buildForwardBatch([{ tokenIds: p.prompt, startPosition: 0, blockTable, sample: true }], 16));
      const catchUp = { ...buildForwardBatch([{ tokenIds: p.prompt.slice(1), startPosition: 0, blockTable, sample: true }], 16),
        carryRows: Int32Array.from({ length: n - 1 }, (_, t) => t) };
      const logits = model.eagle3Logits({ ...catchUp, logitsIndices: Int32Array.from({ length: n - 1 }, (_, t) => t) }, 'target');
      for (const { position, logits: want } of p.catch_up) compare(logits.subarray(position * V, (position + 1) * V), want);
      const next = { ...buildForwardBatch([{ tokenIds: [p.chained.proposal], startPosition: n - 1, blockTable, sample: true }], 16),
        carryRows: Int32Array.from([n - 2]) };
      compare(model.eagle3Logits(next, 'head'), p.chained.logits);
      model.forward(buildForwardBatch([{ tokenIds: p.prompt, startPosition: 0, blockTable, sample: true }], 16));
      assert.deepEqual([...model.eagle3Tokens(catchUp, 'target')], [p.proposal]);
    }
    assert.ok(worst < 1e-4, `logits off by ${worst} of their largest`);
  } finally {
    backend.dispose();
    rmSync(dir, { recursive: true, force: true });
  }
});
