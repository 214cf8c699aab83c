// Pipeline parallelism's arithmetic and a stage's view of the model (parallel/pipeline.ts): vLLM's layer split and
// its custom partition, the rank layout (rank 0 the last stage), a stage's config and the tensors it reads (its own
// layers only; embed_tokens on the first stage, the final norm and lm_head on the last, the embedding as the lm_head
// where tied), and the stages' forwards chained in one thread giving the whole model's logits bit for bit, hybrid
// models included (a stage of DeltaNet layers alone, a stage of attention layers alone).

import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { PipelineStageLink, Tensor } from '../../src/backend/backend.js';
import { CpuBackend } from '../../src/backend/cpu/cpu-backend.js';
import { asCpu } from '../../src/backend/cpu/tensor.js';
import { parseModelConfig } from '../../src/loader/config.js';
import type { ModelConfig, WeightSource } from '../../src/loader/types.js';
import { Model } from '../../src/model/model.js';
import { randomWeightSource } from '../../src/model/random-weights.js';
import {
  layerPartition, pipelineRefusal, rankAt, rankPlace, rankView, stagedConfig, stagedSource, stageLayers,
} from '../../src/parallel/pipeline.js';
import { testModelShapes } from '../../src/tools/test-model/shapes.js';
import { prepare, twoPrompts } from './tp-model-batch.js';

const configOf = (shape: string): ModelConfig => ({ ...parseModelConfig(testModelShapes()[shape], shape), dtype: 'f32' as const });

test('the layers split as vLLM splits them: even, the rest to the stages before the last, or as the partition says', () => {
  // vLLM's test_uneven_auto_partition cases, as layer counts
  const cases: [number, number, number[]][] = [[2, 2, [1, 1]], [3, 2, [2, 1]], [3, 3, [1, 1, 1]], [4, 3, [1, 2, 1]],
    [5, 3, [2, 2, 1]], [36, 2, [18, 18]], [28, 3, [9, 10, 9]], [5, 1, [5]], [62, 4, [15, 16, 16, 15]]];
  for (const [layers, pp, counts] of cases) assert.deepEqual(layerPartition(layers, pp, undefined), counts, `${layers} over ${pp}`);
  assert.deepEqual(stageLayers([2, 2, 1]), [{ first: 0, count: 2 }, { first: 2, count: 2 }, { first: 4, count: 1 }]);
  // vLLM's test_custom_layer_partition
  assert.deepEqual(layerPartition(20, 4, '4,6,6,4'), [4, 6, 6, 4]);
  assert.deepEqual(layerPartition(22, 4, '5,6,5,6'), [5, 6, 5, 6]);
  assert.throws(() => layerPartition(20, 4, '5,5,5'), /QUIRE_PP_LAYER_PARTITION=5,5,5 gives 3 stages, --pipeline-parallel-size is 4/);
  assert.throws(() => layerPartition(21, 4, '5,5,5,5'), /sums to 20 layers; the model has 21 \(num_hidden_layers\)/);
  assert.throws(() => layerPartition(10, 2, '10,0'), /every stage needs a whole number of layers, at least 1/);
  assert.throws(() => layerPartition(5, 6, undefined), /--pipeline-parallel-size 6 is more than the model's 5 layers/);
  assert.equal(pipelineRefusal(configOf('tiny-qwen3'), 2), null);
  assert.match(pipelineRefusal(configOf('tiny-qwen3'), 3)!, /--pipeline-parallel-size 3 is more than the model's 2 layers/);
});

test('the partition knob is read where the split is made, and a value that is not layer counts stops start-up', async () => {
  const { readKnob } = await import('../../src/knobs/knobs.js');
  const saved = process.env.QUIRE_PP_LAYER_PARTITION;
  try {
    process.env.QUIRE_PP_LAYER_PARTITION = '1,4';
    assert.deepEqual(layerPartition(5, 2), [1, 4]);
    process.env.QUIRE_PP_LAYER_PARTITION = '2;3';
    assert.throws(() => readKnob('QUIRE_PP_LAYER_PARTITION'), /QUIRE_PP_LAYER_PARTITION=2;3: expected comma-separated layer counts/);
  } finally {
    if (saved === undefined) delete process.env.QUIRE_PP_LAYER_PARTITION; else process.env.QUIRE_PP_LAYER_PARTITION = saved;
  }
});

test('rank 0 is the last stage: the stages count down the ranks, a stage\'s tensor-parallel ranks side by side', () => {
  assert.deepEqual([0, 1, 2].map((r) => rankPlace(r, 1, 3)), [{ tpRank: 0, stage: 2 }, { tpRank: 0, stage: 1 }, { tpRank: 0, stage: 0 }]);
  assert.deepEqual([0, 1, 2, 3, 4, 5].map((r) => rankPlace(r, 2, 3)),
    [{ tpRank: 0, stage: 2 }, { tpRank: 1, stage: 2 }, { tpRank: 0, stage: 1 }, { tpRank: 1, stage: 1 }, { tpRank: 0, stage: 0 }, { tpRank: 1, stage: 0 }]);
  for (let r = 0; r < 6; r++) {
    const { stage, tpRank } = rankPlace(r, 2, 3);
    assert.equal(rankAt(stage, tpRank, 2, 3), r);
  }
  assert.throws(() => rankPlace(6, 2, 3), /rank 6 is not in \[0, 6\)/);
});

test('a stage\'s config holds its layers, numbered from 0, with their MoE and hybrid fields', () => {
  const moe = configOf('tiny-qwen3-moe');
  assert.deepEqual(moe.moe!.sparseLayers, [true, false, true]);
  const [first, last] = stageLayers(layerPartition(3, 2, undefined));
  const s1 = stagedConfig(moe, 1, 2, last!);
  assert.equal(s1.numLayers, 1);
  assert.deepEqual(s1.moe!.sparseLayers, [true]);
  assert.deepEqual(s1.pipelineStage, { stage: 1, numStages: 2, firstLayer: 2 });
  assert.deepEqual(stagedConfig(moe, 0, 2, first!).moe!.sparseLayers, [true, false]);
  const hybrid = configOf('tiny-qwen3.5');
  const mid = stagedConfig(hybrid, 1, 3, stageLayers(layerPartition(4, 3, undefined))[1]!);
  assert.deepEqual(mid.hybrid!.layerTypes, ['full_attention', 'linear_attention']);
});

/** `source`, recording every tensor name read. */
function counting(source: WeightSource): { source: WeightSource; read: Set<string> } {
  const read = new Set<string>();
  return { read, source: { ...source, read: (n) => { read.add(n); return source.read(n); },
    ...(source.readInto ? { readInto: (n: string, o: number, d: Uint8Array) => { read.add(n); source.readInto!(n, o, d); } } : {}) } };
}

const layerOf = (name: string): number | null => {
  const m = /layers\.(\d+)\./.exec(name);
  return m ? Number(m[1]) : null;
};

for (const [shape, pp] of [['tiny-qwen3', 2], ['tiny-qwen3-moe', 2], ['tiny-qwen3-moe', 3], ['tiny-qwen3.5', 3]] as const) {
  test(`${shape} over ${pp} stages: each stage reads its own layers alone, and what around them it runs`, () => {
    const config = configOf(shape);
    const layers = stageLayers(layerPartition(config.numLayers, pp, undefined));
    const seen = new Set<string>();
    layers.forEach((range, stage) => {
      const { source, read } = counting(randomWeightSource(config, { seed: 3 }));
      const backend = new CpuBackend({ kvCacheBytes: 1 << 20, numThreads: 1 });
      const link: PipelineStageLink = { stage, numStages: pp, send: () => {}, recv: () => {} };
      Model.load(stagedConfig(config, stage, pp, range), stagedSource(source, range), backend, { pipeline: link });
      backend.dispose();
      for (const name of read) {
        const l = layerOf(name);
        if (l !== null) assert.ok(l >= range.first && l < range.first + range.count, `stage ${stage} read ${name}`);
        seen.add(name);
      }
      const last = stage === pp - 1;
      assert.equal(read.has('model.embed_tokens.weight'), stage === 0 || (last && config.tieWordEmbeddings), `stage ${stage}: embed_tokens`);
      assert.equal(read.has('model.norm.weight'), last, `stage ${stage}: the final norm`);
      assert.equal(read.has('lm_head.weight'), last && !config.tieWordEmbeddings, `stage ${stage}: lm_head`);
    });
    // together the stages read the whole checkpoint, but for an MTP head's mtp.* (read only with that method, which
    // refuses pipeline parallelism)
    const all = new Set(randomWeightSource(config, { seed: 3 }).names().filter((n) => !n.startsWith('mtp.')));
    assert.deepEqual([...seen].sort(), [...all].sort());
  });
}

test('a rank of tp x pp reads its tensor-parallel shard of its stage\'s layers', () => {
  const config = configOf('tiny-qwen3');
  const layers = stageLayers(layerPartition(2, 2, undefined));
  const { source, read } = counting(randomWeightSource(config, { seed: 3 }));
  // the second stage (of layer 1) as tensor-parallel rank 1 sees it: layer 1 named layer 0, half of its heads
  const view = rankView(config, source, { tpRank: 1, stage: 1 }, 2, 2, layers[1]!);
  assert.equal(view.config.numHeads, config.numHeads / 2);
  assert.equal(view.config.numLayers, 1);
  assert.deepEqual(new Set(view.weights.names().map(layerOf).filter((l) => l !== null)), new Set([0]));
  const q = view.weights.read('model.layers.0.self_attn.q_proj.weight');
  assert.equal(q.name, 'model.layers.0.self_attn.q_proj.weight');
  assert.deepEqual(q.shape, [config.numHeads / 2 * config.headDim, config.hiddenSize]);
  assert.deepEqual([...read], ['model.layers.1.self_attn.q_proj.weight']);
  assert.throws(() => view.weights.read('model.layers.1.self_attn.q_proj.weight'), /past this pipeline stage's layers/);
});

/** Stages in one thread: each send's tensors copied into a queue the next stage's recv takes them from. */
function queueLinks(pp: number): PipelineStageLink[] {
  const queues = Array.from({ length: pp }, () => [] as Float32Array[]);
  return Array.from({ length: pp }, (_, stage) => ({
    stage, numStages: pp,
    send: (ts: readonly Tensor[]) => { for (const t of ts) queues[stage + 1]!.push(asCpu(t).data.slice()); },
    recv: (ts: readonly Tensor[]) => { for (const t of ts) asCpu(t).data.set(queues[stage]!.shift()!); },
  }));
}

for (const [shape, pp] of [['tiny-qwen3', 2], ['tiny-qwen3-moe', 3], ['tiny-qwen3.5', 2], ['tiny-qwen3.5', 3], ['tiny-qwen3.5', 4]] as const) {
  test(`${shape}'s ${pp} stages chained: the last stage's logits are the whole model's, bit for bit`, () => {
    const config = configOf(shape);
    const hybrid = config.hybrid !== null;
    const whole = new CpuBackend({ kvCacheBytes: 1 << 22, numThreads: 1 });
    const model = Model.load(config, randomWeightSource(config, { seed: 5 }), whole);
    prepare(model, whole);
    const expected = model.forward(twoPrompts(hybrid));
    whole.dispose();
    const links = queueLinks(pp);
    const outs = stageLayers(layerPartition(config.numLayers, pp, undefined)).map((range, stage) => {
      const backend = new CpuBackend({ kvCacheBytes: 1 << 22, numThreads: 1 });
      const m = Model.load(stagedConfig(config, stage, pp, range), stagedSource(randomWeightSource(config, { seed: 5 }), range),
        backend, { pipeline: links[stage]! });
      prepare(m, backend);
      assert.equal(m.computesLogits, stage === pp - 1);
      const logits = m.forward(twoPrompts(hybrid));
      backend.dispose();
      return logits;
    });
    outs.slice(0, -1).forEach((o, s) => assert.equal(o.length, 0, `stage ${s} computes no logits`));
    assert.deepEqual(outs.at(-1), expected);
  });
}

test('a stage needs its staged config and its link, of the same stage', () => {
  const config = configOf('tiny-qwen3');
  const range = stageLayers([1, 1])[0]!;
  const backend = new CpuBackend({ kvCacheBytes: 1 << 20, numThreads: 1 });
  const staged = stagedConfig(config, 0, 2, range);
  const source = stagedSource(randomWeightSource(config, { seed: 1 }), range);
  assert.throws(() => Model.load(staged, source, backend), /a pipeline stage needs its staged config and its link/);
  assert.throws(() => Model.load(staged, source, backend, { pipeline: { stage: 1, numStages: 2, send: () => {}, recv: () => {} } }),
    /of the same stage/);
  backend.dispose();
});
