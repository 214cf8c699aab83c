// CUDA graphs: a decode step replayed from a captured graph gives exactly the
// eager logits, for new positions, longer block tables and new token ids; and
// profiling mode reports every bucket of a step, for a graph replay from the
// event-record nodes captured into the graph.

import { after, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { Model } from '../../src/model/model.js';
import { randomWeightSource, tinyConfig } from '../../src/model/random-weights.js';
import { batchOf } from '../backend/helpers.js';
import { newCuda, noCuda } from './cuda-helpers.js';
import type { CudaBackend } from '../../src/backend/cuda/cuda-backend.js';
import { createBackend } from '../../src/engine/backend-factory.js';
import { engineOptions } from '../../src/engine/options.js';

const config = tinyConfig('qwen3', { hiddenSize: 128, intermediateSize: 192, numHeads: 4, numKvHeads: 2,
  headDim: 64, vocabSize: 300 });
const blockSize = 16;

function prefillAndDecode(cuda: CudaBackend, onDecode: (model: Model, batch: ReturnType<typeof batchOf>) => void): void {
  const model = Model.load(config, randomWeightSource(config, { seed: 3 }), cuda);
  cuda.allocateKvCache(model.kvCacheSpec(32, blockSize));
  const pages = [[7, 2, 9, 30], [1, 14, 22, 5]];
  const prompt = [Array.from({ length: 20 }, (_, i) => (i * 13) % 300), Array.from({ length: 33 }, (_, i) => (i * 29) % 300)];
  model.forward(batchOf([{ ids: prompt[0]!, start: 0, pages: pages[0]! }, { ids: prompt[1]!, start: 0, pages: pages[1]! }],
    blockSize, [19, 52]));
  for (let step = 0; step < 5; step++) {
    const lens = [20 + step, 33 + step];
    const batch = batchOf(lens.map((len, s) => ({ ids: [(len * 31 + s) % 300], start: len,
      pages: pages[s]!.slice(0, Math.floor(len / blockSize) + 1) })), blockSize, [0, 1]);
    onDecode(model, batch);
  }
}

describe('CUDA graphs', { skip: noCuda }, () => {
  const backends: CudaBackend[] = [];
  after(() => backends.forEach((b) => b.dispose()));

  test('replay equals eager, step after step, with one capture per bucket', () => {
    const cuda = newCuda();
    backends.push(cuda);
    let numSteps = 0;
    prefillAndDecode(cuda, (model, batch) => {
      const eager = model.forward(batch);
      const graphed = cuda.graph(2, batch, () => model.forward(batch));
      assert.deepEqual(graphed, eager, `decode step ${numSteps}`);
      numSteps++;
    });
    assert.equal(cuda.numGraphs, 1);
    assert.equal(cuda.numGraphReplays, numSteps - 1);
    assert.equal(cuda.numGraphCaptures, 1);
    assert.ok(cuda.graphCaptureMs > 0);
  });

  test('a row that grows past 2,048 positions gets its kv class\'s graph (a grid for more splits), replay equal to eager', () => {
    const cuda = newCuda();
    backends.push(cuda);
    const long = { ...config, maxPositionEmbeddings: 4096 };
    const model = Model.load(long, randomWeightSource(long, { seed: 5 }), cuda);
    cuda.allocateKvCache(model.kvCacheSpec(140, blockSize));
    const pages = Array.from({ length: 134 }, (_, i) => (i * 3) % 140);  // distinct pages
    const start = 2040;
    model.forward(batchOf([{ ids: Array.from({ length: start }, (_, i) => (i * 17) % 300), start: 0, pages }], blockSize,
      [start - 1]));
    for (let len = start; len < start + 16; len++) {  // kv lengths 2,041 .. 2,056: short class up to 2,048
      const batch = batchOf([{ ids: [(len * 31) % 300], start: len, pages: pages.slice(0, Math.floor(len / blockSize) + 1) }],
        blockSize, [0]);
      const eager = model.forward(batch);
      assert.deepEqual(cuda.graph(1, batch, () => model.forward(batch)), eager, `kv length ${len + 1}`);
    }
    assert.equal(cuda.numGraphCaptures, 2, 'one capture per kv class');
    assert.equal(cuda.numGraphs, 2);
  });

  test('a step that samples on the GPU replays to the eager tokens (greedy and seeded rows)', () => {
    const cuda = newCuda();
    backends.push(cuda);
    let numSteps = 0;
    prefillAndDecode(cuda, (model, batch) => {
      batch.sampling = { temperature: Float32Array.of(0, 0.8), topK: Int32Array.of(0, 50), topP: Float32Array.of(1, 0.9),
        minP: Float32Array.of(0, 0.02), uniform: Float32Array.of(0, (numSteps * 0.37 + 0.1) % 1) };
      const eager = model.forwardTokens(batch);
      const graphed = cuda.graph(3, batch, () => model.forwardTokens(batch));
      assert.ok(graphed instanceof Int32Array);
      assert.deepEqual([...graphed], [...eager], `decode step ${numSteps}`);
      const logits = model.forward(batch);
      let best = 0;
      for (let i = 1; i < config.vocabSize; i++) if (logits[i]! > logits[best]!) best = i;
      assert.equal(graphed[0], best, 'greedy row is the argmax');
      numSteps++;
    });
    assert.equal(cuda.numGraphReplays, numSteps - 1);
  });

  test('a step that throws while being captured leaves no graph, and the next step captures and replays', () => {
    const cuda = newCuda();
    backends.push(cuda);
    let numSteps = 0;
    prefillAndDecode(cuda, (model, batch) => {
      const eager = model.forward(batch);
      if (numSteps === 0) {
        let calls = 0;
        // graph() runs the step eagerly, then again under capture: that second run throws
        assert.throws(() => cuda.graph(2, batch, () => {
          if (++calls === 2) throw new Error('failed in capture');
          return model.forward(batch);
        }), /failed in capture/);
        assert.equal(cuda.numGraphs, 0);
      } else {
        assert.deepEqual(cuda.graph(2, batch, () => model.forward(batch)), eager, `decode step ${numSteps}`);
      }
      numSteps++;
    });
    assert.equal(cuda.numGraphs, 1);
    assert.equal(cuda.numGraphReplays, numSteps - 2);
  });

  test('enforceEager runs the function and captures nothing', () => {
    const cuda = newCuda({ enforceEager: true });
    backends.push(cuda);
    prefillAndDecode(cuda, (model, batch) => {
      assert.equal(cuda.graph(2, batch, () => model.forward(batch)).length, 2 * config.vocabSize);
    });
    assert.equal(cuda.numGraphs, 0);
  });

  test('profile mode prints a table of buckets whose shares sum to the step', () => {
    const logged: string[] = [];
    const cuda = newCuda({ profile: true, log: (text) => logged.push(text) });
    backends.push(cuda);
    prefillAndDecode(cuda, (model, batch) => { model.forward(batch); });
    const last = cuda.lastProfile!;
    const buckets = last.rows.map((r) => r.bucket);
    for (const b of ['attention', 'norm', 'rope', 'activation', 'embedding', 'sampling', 'copies', 'host gaps']) {
      assert.ok(buckets.includes(b), `${b} in ${buckets.join(', ')}`);
    }
    assert.ok(buckets.some((b) => b.startsWith('gemm')));
    assert.equal(last.kind, 'eager');
    const share = last.rows.reduce((s, r) => s + r.share, 0);
    assert.ok(share > 0.99 && share < 1.05, `shares sum to ${share}`);
    assert.ok(logged.length >= 6 && logged[0]!.includes('host gaps'));
  });

  test('profile mode replays the graph and times its nodes through event-record nodes', () => {
    const logged: string[] = [];
    const cuda = newCuda({ profile: true, log: (text) => logged.push(text) });
    backends.push(cuda);
    const graphProfiles: NonNullable<CudaBackend['lastProfile']>[] = [];
    prefillAndDecode(cuda, (model, batch) => {
      const eager = model.forward(batch);
      const numReplays = cuda.numGraphReplays;
      const graphed = cuda.graph(2, batch, () => model.forward(batch));
      assert.deepEqual(graphed, eager, 'profiling changes no logit');
      if (cuda.numGraphReplays === numReplays + 1) graphProfiles.push(cuda.lastProfile!);
    });
    assert.equal(cuda.numGraphs, 1);
    assert.equal(cuda.numGraphReplays, 4);
    assert.equal(graphProfiles.length, 4);
    assert.equal(new Set(graphProfiles).size, 4, 'a fresh table per replay');
    for (const p of graphProfiles) {
      assert.equal(p.kind, 'graph');
      assert.equal(p.shape, 'graph 2');
      const by = new Map(p.rows.map((r) => [r.bucket, r]));
      for (const b of ['attention', 'norm', 'rope', 'activation', 'embedding', 'sampling', 'copies', 'host gaps',
        'gemm qkv', 'gemm o', 'gemm gate_up', 'gemm down']) {
        assert.ok(by.has(b), `${b} in ${[...by.keys()].join(', ')}`);
      }
      assert.ok(by.has('gemm lm_head'), 'model.ts labels the lm_head GEMM');
      for (const b of ['attention', 'gemm qkv', 'gemm o', 'gemm gate_up', 'gemm down']) {
        assert.equal(by.get(b)!.numCalls, config.numLayers, b);
      }
      assert.ok(p.gpuMs > 0 && p.gpuMs <= p.stepMs, `GPU ${p.gpuMs} ms of a ${p.stepMs} ms step`);
      assert.ok(p.rows.every((r) => r.totalMs >= 0 && Number.isFinite(r.totalMs)));
      const share = p.rows.reduce((s, r) => s + r.share, 0);
      assert.ok(share > 0.99 && share < 1.01, `shares sum to ${share}`);
    }
    assert.ok(logged.some((text) => text.includes('graph 2 (graph replay')), 'a replay printed its table');
  });

  test("profileLog 'once-per-shape' prints an eager shape from its second step (one seen once at dispose) and a graph from its second replay", () => {
    const logged: string[] = [];
    const cuda = newCuda({ profile: true, profileLog: 'once-per-shape', log: (text) => logged.push(text) });
    prefillAndDecode(cuda, (model, batch) => { cuda.graph(2, batch, () => model.forward(batch)); });
    assert.equal(cuda.numGraphReplays, 4);
    assert.equal(logged.length, 1, logged.map((t) => t.split('\n')[0]).join(' | '));
    assert.match(logged[0]!, /^graph 2 \(graph replay/);
    cuda.dispose();
    assert.equal(logged.length, 3, logged.map((t) => t.split('\n')[0]).join(' | '));
    assert.match(logged[1]!, /^prefill\/mixed <=64 tokens \(eager, its only step\)/);
    assert.match(logged[2]!, /^decode <=2 tokens \(eager, its only step\)/);
  });

  test('the engine with --profile profiles graph replays', async () => {
    const { backend } = await createBackend(engineOptions({ model: 'unused', backend: 'cuda', profile: true }));
    const cuda = backend as CudaBackend;
    backends.push(cuda);
    prefillAndDecode(cuda, (model, batch) => { cuda.graph(2, batch, () => model.forward(batch)); });
    assert.equal(cuda.numGraphReplays, 4);
    assert.equal(cuda.lastProfile?.kind, 'graph');
  });
});
