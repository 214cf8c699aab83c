// Embedding requests (a pooling runner): the prompt is prefilled and its last token's final hidden state comes back;
// nothing is generated, the pages are freed, and the embedding does not depend on the batch, the chunking or the
// prefix cache (the CPU backend is batch-invariant).

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { EngineCore } from '../../src/engine/engine-core.js';
import { createEngineCore } from '../../src/engine/create-engine.js';
import { poolEmbedding } from '../../src/engine/pooling.js';
import { engineOptions, type EngineOptions } from '../../src/engine/options.js';
import type { EngineOutput, EngineRequest, PoolingParams } from '../../src/engine/types.js';
import { openWeights } from '../../src/loader/model-dir.js';
import { defaultSamplingParams } from '../../src/sampling/params.js';
import { makeTestModel } from '../../src/tools/make-test-model.js';

let dir = '';
before(async () => {
  dir = mkdtempSync(join(tmpdir(), 'quire-embed-'));
  await makeTestModel({ shape: 'tiny-qwen3', outDir: dir, dtype: 'f32', seed: 3 });
});
after(() => rmSync(dir, { recursive: true, force: true }));

const RAW: PoolingParams = { normalize: false, dimensions: null };
const P1 = [5, 9, 11, 40, 3, 77, 12, 8, 150, 9, 31, 2, 17, 19, 23];
const P2 = [300, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21];

const embedReq = (id: string, prompt: number[], pooling = RAW): EngineRequest => ({
  requestId: id, promptTokenIds: prompt, sampling: defaultSamplingParams({ maxTokens: 1 }), priority: 0,
  cacheSalt: null, arrivalTime: 0, pooling,
});
const genReq = (id: string, prompt: number[], maxTokens = 6, logprobs: number | null = null): EngineRequest => ({
  requestId: id, promptTokenIds: prompt, priority: 0, cacheSalt: null, arrivalTime: 0,
  sampling: defaultSamplingParams({ temperature: 0, ignoreEos: true, maxTokens, logprobs }),
});

async function withCore<T>(opts: Partial<EngineOptions>, fn: (core: EngineCore) => T): Promise<T> {
  const core = await createEngineCore(engineOptions({ model: dir, backend: 'cpu', cpuThreads: 1, ...opts }));
  try {
    return fn(core);
  } finally {
    core.dispose();
  }
}

function runAll(core: EngineCore, reqs: EngineRequest[]): Map<string, EngineOutput[]> {
  reqs.forEach((r) => core.addRequest(r));
  const out = new Map<string, EngineOutput[]>();
  while (core.hasWork()) for (const o of core.advance()) out.set(o.requestId, [...out.get(o.requestId) ?? [], o]);
  return out;
}

const embeddingOf = (outs: EngineOutput[] | undefined) => {
  assert.equal(outs?.length, 1, 'an embedding request has one output');
  const o = outs[0]!;
  assert.equal(o.finished, true);
  assert.deepEqual(o.newTokenIds, []);
  assert.ok(o.embedding, 'with its embedding');
  return o.embedding;
};

test('the embedding is the final hidden state: through lm_head it gives the first token\'s logprobs', async () => {
  await withCore({}, (core) => {
    const out = runAll(core, [embedReq('e', P1), genReq('g', P1, 1, 5)]);
    const h = embeddingOf(out.get('e'));
    const w = openWeights(dir).read('model.embed_tokens.weight');  // tiny-qwen3 ties lm_head to it
    assert.equal(w.dtype, 'f32');
    const table = new Float32Array(w.data.slice().buffer);
    const vocab = core.info.vocabSize;
    assert.equal(table.length, vocab * h.length, 'one value per hidden dim');
    const logits = Array.from({ length: vocab }, (_, v) => {
      let s = 0;
      for (let d = 0; d < h.length; d++) s += table[v * h.length + d]! * h[d]!;
      return s;
    });
    const max = Math.max(...logits);
    const lse = max + Math.log(logits.reduce((a, l) => a + Math.exp(l - max), 0));
    const lp = out.get('g')![0]!.logprobs![0]!;
    assert.equal(lp.tokenId, logits.indexOf(max), 'greedy token = argmax of the projected embedding');
    for (const t of lp.top) assert.ok(Math.abs(t.logprob - (logits[t.tokenId]! - lse)) < 1e-4, `token ${t.tokenId}`);
  });
});

test('embeddings do not depend on the batch, chunked prefill or the prefix cache; pages are all freed', async () => {
  const alone = await withCore({}, (core) => [embeddingOf(runAll(core, [embedReq('a', P1)]).get('a')),
    embeddingOf(runAll(core, [embedReq('b', P2)]).get('b'))]);
  await withCore({ maxNumBatchedTokens: 8, maxNumSeqs: 4 }, (core) => {
    const total = core.kv.numFreeBlocks;
    const out = runAll(core, [genReq('g1', P2, 9), embedReq('a', P1), genReq('g2', P1, 7), embedReq('b', P2)]);
    assert.deepEqual(embeddingOf(out.get('a')), alone[0]);
    assert.deepEqual(embeddingOf(out.get('b')), alone[1]);
    assert.equal(out.get('g1')!.flatMap((o) => o.newTokenIds).length, 9, 'generation beside them is unaffected');
    // the same prompt again: its full pages come from the prefix cache
    const again = runAll(core, [embedReq('c', P2)]).get('c');
    assert.ok((again![0]!.numCachedTokens ?? 0) > 0, 'served from the prefix cache');
    assert.deepEqual(embeddingOf(again), alone[1]);
    assert.equal(core.kv.numFreeBlocks, total, 'no page leaked');
  });
});

test('async scheduling goes on while an embedding\'s prompt is prefilled in chunks; the step that ends it completes first', async () => {
  const long = Array.from({ length: 60 }, (_, i) => (i * 13 + 7) % 300);
  const alone = await withCore({}, (core) => embeddingOf(runAll(core, [embedReq('e', long)]).get('e')));
  await withCore({ maxNumBatchedTokens: 8, maxNumSeqs: 4 }, (core) => {
    core.addRequest(genReq('g', P1, 40));
    core.addRequest(embedReq('e', long));
    let aheadBefore = -1;
    const outs: EngineOutput[] = [];
    while (core.hasWork()) {
      for (const o of core.advance()) {
        outs.push(o);
        if (o.embedding) aheadBefore = core.stats().numStepsScheduledAhead;
      }
    }
    assert.ok(aheadBefore > 0, `steps scheduled ahead before the embedding came: ${aheadBefore}`);
    assert.deepEqual(embeddingOf(outs.filter((o) => o.requestId === 'e')), alone);
    assert.equal(outs.filter((o) => o.requestId === 'g').flatMap((o) => o.newTokenIds).length, 40);
  });
});

test('normalize and dimensions: the first values, divided by their norm', async () => {
  await withCore({}, (core) => {
    const out = runAll(core, [embedReq('raw', P1), embedReq('n', P1, { normalize: true, dimensions: null }),
      embedReq('d', P1, { normalize: true, dimensions: 8 })]);
    const raw = embeddingOf(out.get('raw'));
    const n = embeddingOf(out.get('n'));
    const d = embeddingOf(out.get('d'));
    const norm = (v: number[]) => Math.sqrt(v.reduce((a, x) => a + x * x, 0));
    assert.ok(Math.abs(norm(n) - 1) < 1e-6 && Math.abs(norm(d) - 1) < 1e-6);
    assert.equal(d.length, 8);
    raw.forEach((x, i) => assert.ok(Math.abs(x / norm(raw) - n[i]!) < 1e-6));
    raw.slice(0, 8).forEach((x, i) => assert.ok(Math.abs(x / norm(raw.slice(0, 8)) - d[i]!) < 1e-6));
  });
});

test('an input longer than the context is refused, and an aborted embedding frees its pages', async () => {
  await withCore({ maxModelLen: 32, maxNumBatchedTokens: 8 }, (core) => {
    const total = core.kv.numFreeBlocks;
    const long = runAll(core, [embedReq('long', Array.from({ length: 33 }, (_, i) => i + 1))]).get('long')!;
    assert.match(long[0]!.error ?? '', /input \(33 tokens\) exceeds the context length 32/);
    const exact = runAll(core, [embedReq('exact', Array.from({ length: 32 }, (_, i) => i + 1))]).get('exact');
    assert.equal(embeddingOf(exact).length > 0, true, 'an input of the whole context is served');
    core.addRequest(embedReq('x', P2));
    core.advance();  // its first chunk is computing
    assert.deepEqual(core.abortRequest('x').map((o) => o.finishReason), ['abort']);
    while (core.hasWork()) core.advance();
    assert.equal(core.kv.numFreeBlocks, total, 'no page leaked');
  });
});

test('poolEmbedding: a zero vector stays zero when normalized (the norm is held to 1e-12)', () => {
  assert.deepEqual(poolEmbedding(new Float32Array(4), { normalize: true, dimensions: null }), [0, 0, 0, 0]);
  const d = poolEmbedding(Float32Array.from([3, 4, 12]), { normalize: true, dimensions: 2 });
  assert.equal(d.length, 2);
  assert.deepEqual(d, [Math.fround(0.6), Math.fround(0.8)]);
});

test('LLM.embed: texts and token ids, normalized by default, the engine\'s embedding of the same ids', async () => {
  const { LLM } = await import('../../src/engine/llm.js');
  const llm = new LLM(dir, { backend: 'cpu', cpuThreads: 1 });
  try {
    const [text, ids] = await llm.embed(['in the beginning', P1]);
    assert.ok(text!.promptTokenIds.length > 0);
    for (const e of [text!, ids!]) assert.ok(Math.abs(Math.hypot(...e.embedding) - 1) < 1e-5, 'unit length');
    const raw = await llm.embed([P1], { normalize: false });
    const direct = await withCore({}, (core) => embeddingOf(runAll(core, [embedReq('a', P1)]).get('a')));
    assert.deepEqual(raw[0]!.embedding, direct);
    await assert.rejects(llm.embed('x', { dimensions: 8 }), /does not support 8 dimensions/);
  } finally {
    await llm.close();
  }
});
