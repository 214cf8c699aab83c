// A pipeline-parallel engine on the CPU backend (engine/tp/: rank 0 in the engine runs the last stage, the other
// stages in worker threads following each step's DeviceStep, the residual stream passed through shared-memory
// mailboxes): its greedy tokens are one engine's, bit for bit, with the prefix cache, chunked prompts, several
// sequences a step and async scheduling asked for, over stages the layers do not divide evenly, for a hybrid model
// (stages of DeltaNet layers alone) and with tensor-parallel ranks in each stage; each stage's KV cache holds its own
// layers, so the engine holds more pages; bad sizes are refused at start-up naming the flag; a rank that fails ends
// the step, or the start-up, with its error.

import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CpuBackend } from '../../src/backend/cpu/cpu-backend.js';
import { buildForwardBatch } from '../../src/engine/batch-builder.js';
import { createEngineCore } from '../../src/engine/create-engine.js';
import { LLM } from '../../src/engine/llm.js';
import { engineOptions, type EngineOptions } from '../../src/engine/options.js';
import type { EngineOutput, EngineRequest } from '../../src/engine/types.js';
import { defaultSamplingParams } from '../../src/sampling/params.js';
import { runDeviceStep } from '../../src/engine/runner/device-steps.js';
import { devicesRefusal, loadEngineModel } from '../../src/engine/tp/leader.js';
import { defaultModelDir } from '../../src/loader/default-model.js';
import { loadModel } from '../../src/loader/model-dir.js';
import { makeTestModel } from '../../src/tools/make-test-model.js';

const DEMO = defaultModelDir();  // 5 layers: -pp 2 splits them 3 + 2, -pp 3 2 + 2 + 1
const root = mkdtempSync(join(tmpdir(), 'quire-pp-'));
before(async () => {
  await makeTestModel({ shape: 'tiny-qwen3', outDir: join(root, 'qwen3'), dtype: 'f32', seed: 11 });
  await makeTestModel({ shape: 'tiny-qwen3.5', outDir: join(root, 'hybrid'), dtype: 'f32', seed: 11 });
});
after(() => rmSync(root, { recursive: true, force: true }));

const prompts = ['The quick brown fox', 'Once upon a time in a land far away, there lived', 'The quick brown fox jumps'];

async function greedy(model: string, o: Partial<EngineOptions>): Promise<number[][]> {
  const llm = new LLM(model, { backend: 'cpu', cpuThreads: 1, maxModelLen: 256, enablePrefixCaching: true, ...o });
  try {
    const out = await llm.generate(prompts, { maxTokens: 12, temperature: 0, ignoreEos: true });
    return out.map((c) => c.tokenIds);
  } finally {
    await llm.close();
  }
}

test('-pp 2 and -pp 3 give one engine\'s greedy tokens (chunked prompts, prefix hits, batched rows, uneven stages)', async () => {
  const one = await greedy(DEMO, { maxNumBatchedTokens: 8 });
  assert.deepEqual(await greedy(DEMO, { maxNumBatchedTokens: 8, pipelineParallelSize: 2 }), one);
  assert.deepEqual(await greedy(DEMO, { pipelineParallelSize: 3 }), one);
  assert.deepEqual(await greedy(DEMO, { pipelineParallelSize: 2, asyncScheduling: false }), one);
});

test('micro-batches keep steps of other requests in flight (each stage on one); one step at a time gives the same tokens', async () => {
  const run = async (microBatches: string) => {
    const saved = process.env.QUIRE_PP_MICRO_BATCHES;
    process.env.QUIRE_PP_MICRO_BATCHES = microBatches;
    const llm = new LLM(DEMO, { backend: 'cpu', cpuThreads: 1, maxModelLen: 256, pipelineParallelSize: 2 });
    try {
      const out = await llm.generate(prompts, { maxTokens: 12, temperature: 0, ignoreEos: true });
      return { tokens: out.map((c) => c.tokenIds), stats: await llm.stats() };
    } finally {
      await llm.close();
      if (saved === undefined) delete process.env.QUIRE_PP_MICRO_BATCHES; else process.env.QUIRE_PP_MICRO_BATCHES = saved;
    }
  };
  const [micro, single] = [await run('0'), await run('1')];
  assert.deepEqual(micro.tokens, single.tokens);
  assert.deepEqual(micro.tokens, await greedy(DEMO, {}));
  // three requests in two micro-batches: most steps launched while the other was in flight, twice the steps
  assert.ok(micro.stats.numStepsScheduledAhead > 10, `${micro.stats.numStepsScheduledAhead} steps launched ahead`);
  assert.equal(single.stats.numStepsScheduledAhead, 0);
  assert.ok(micro.stats.numSteps > 1.5 * single.stats.numSteps, `${micro.stats.numSteps} steps against ${single.stats.numSteps}`);
});

test('what the last stage returns is one engine\'s: embeddings, logprobs, prompt logprobs, seeded sampling', async () => {
  const base = { priority: 0, cacheSalt: null, arrivalTime: 0 };
  const prompt = [5, 9, 11, 40, 3, 77, 12, 8, 150, 9, 31, 2, 17];
  const reqs: EngineRequest[] = [
    { ...base, requestId: 'embed', promptTokenIds: prompt, sampling: defaultSamplingParams({ maxTokens: 1 }),
      pooling: { normalize: true, dimensions: null } },
    { ...base, requestId: 'logprobs', promptTokenIds: prompt.slice(2),
      sampling: defaultSamplingParams({ temperature: 0, ignoreEos: true, maxTokens: 6, logprobs: 3, promptLogprobs: 2 }) },
    { ...base, requestId: 'sampled', promptTokenIds: prompt.slice(5),
      sampling: defaultSamplingParams({ temperature: 0.8, topP: 0.9, seed: 5, ignoreEos: true, maxTokens: 8 }) },
  ];
  const run = async (pp: number) => {
    const core = await createEngineCore(engineOptions({ model: join(root, 'qwen3'), backend: 'cpu', cpuThreads: 1, pipelineParallelSize: pp }));
    try {
      reqs.forEach((r) => core.addRequest(r));
      const out = new Map<string, EngineOutput[]>();
      while (core.hasWork()) for (const o of core.advance()) out.set(o.requestId, [...out.get(o.requestId) ?? [], o]);
      return out;
    } finally {
      core.dispose();
    }
  };
  const [one, two] = [await run(1), await run(2)];
  assert.ok(one.get('embed')![0]!.embedding, 'an embedding');
  assert.ok(one.get('logprobs')!.some((o) => o.promptLogprobs), 'prompt logprobs');
  assert.deepEqual(two, one);
});

test('a hybrid model over -pp 2 and -pp 3 (a stage of DeltaNet layers alone, one of attention alone) gives one engine\'s tokens', async () => {
  const one = await greedy(join(root, 'hybrid'), { maxNumBatchedTokens: 8 });
  assert.deepEqual(await greedy(join(root, 'hybrid'), { maxNumBatchedTokens: 8, pipelineParallelSize: 2 }), one);
  assert.deepEqual(await greedy(join(root, 'hybrid'), { maxNumBatchedTokens: 8, pipelineParallelSize: 3 }), one);
});

test('-tp 2 x -pp 2 (four ranks: two stages of two) gives one engine\'s greedy tokens', async () => {
  const one = await greedy(join(root, 'qwen3'), { maxNumBatchedTokens: 8 });
  assert.deepEqual(await greedy(join(root, 'qwen3'), { maxNumBatchedTokens: 8, tensorParallelSize: 2, pipelineParallelSize: 2 }), one);
});

test('each stage\'s KV cache holds its own layers: the same budget a device holds more pages; the bytes count every stage', async () => {
  const info = async (pp: number) => {
    const core = await createEngineCore(engineOptions({ model: DEMO, backend: 'cpu', cpuThreads: 1, maxModelLen: 256,
      kvCacheBytes: 4 << 20, pipelineParallelSize: pp }));
    try {
      return { ...core.info };
    } finally {
      core.dispose();
    }
  };
  const [one, two] = [await info(1), await info(2)];
  // a page of 16 tokens of all 5 layers on one device; of the larger stage's 3 under -pp 2
  const page = 16 * one.kvBytesPerToken;
  assert.equal(one.numBlocks, Math.floor((4 << 20) / page));
  assert.equal(two.numBlocks, Math.floor((4 << 20) / (page * 3 / 5)));
  assert.equal(two.kvBytesPerToken, one.kvBytesPerToken);
  assert.equal(two.weightBytesPerStep, one.weightBytesPerStep);
});

test('sizes that cannot run are refused at start-up, naming the flag (or the knob)', async () => {
  const start = (o: Partial<EngineOptions>) => createEngineCore(engineOptions({ model: DEMO, backend: 'cpu', cpuThreads: 1, maxModelLen: 256, ...o }));
  await assert.rejects(() => start({ pipelineParallelSize: 6 }), /--pipeline-parallel-size 6 is more than the model's 5 layers \(num_hidden_layers\)/);
  await assert.rejects(() => start({ pipelineParallelSize: 2, tensorParallelSize: 3 }),
    /--tensor-parallel-size 3: num_attention_heads \(4\) is not divisible by the tensor-parallel size \(3\)/);
  const saved = process.env.QUIRE_PP_LAYER_PARTITION;
  process.env.QUIRE_PP_LAYER_PARTITION = '4,2';
  try {
    await assert.rejects(() => start({ pipelineParallelSize: 2 }),
      /--pipeline-parallel-size 2: QUIRE_PP_LAYER_PARTITION=4,2 sums to 6 layers; the model has 5/);
  } finally {
    if (saved === undefined) delete process.env.QUIRE_PP_LAYER_PARTITION; else process.env.QUIRE_PP_LAYER_PARTITION = saved;
  }
  // a CUDA device a rank, from --device-ordinal on
  const o = (x: Partial<EngineOptions>) => engineOptions({ model: 'm', ...x });
  assert.equal(devicesRefusal(o({ pipelineParallelSize: 2 }), 2), null);
  assert.match(devicesRefusal(o({ pipelineParallelSize: 2, tensorParallelSize: 2 }), 3)!,
    /--tensor-parallel-size 2 x --pipeline-parallel-size 2 needs 4 CUDA devices \(devices 0 to 3\), but 3 are visible/);
  assert.match(devicesRefusal(o({ pipelineParallelSize: 4, nnodes: 2 }), 1)!, /needs 2 CUDA devices a node/);
});

test('a stage that fails to load ends the start-up with its error, naming its stage (no hang)', async () => {
  // rank 0 is handed the loaded model; the other ranks load options.model themselves, which here is gone
  const dir = await loadModel(DEMO, engineOptions({ model: DEMO }));
  const given = engineOptions({ model: join(root, 'missing'), backend: 'cpu', cpuThreads: 1, maxModelLen: 256, pipelineParallelSize: 2 });
  await assert.rejects(() => createEngineCore(given, dir), /pipeline stage 0 \(rank 1\): .*missing/);
});

test('a stage whose step throws ends rank 0\'s step with its error, not a wait on its send', async () => {
  const options = engineOptions({ model: DEMO, backend: 'cpu', cpuThreads: 1, pipelineParallelSize: 2 });
  const backend = new CpuBackend({ kvCacheBytes: 1 << 22, numThreads: 1 });
  const { model, tp } = await loadEngineModel(await loadModel(DEMO, options), backend, options);
  try {
    // no KV cache was ever sized: the first stage's attention has no pages to write and throws
    const step = { op: 'tokens' as const, batch: buildForwardBatch([{ tokenIds: [5, 6, 7], startPosition: 0, blockTable: [1], sample: true }], 16),
      graphKey: null };
    tp!.mirror(step);
    assert.throws(() => runDeviceStep(model, undefined, step), /aborted .*: pipeline stage 0 \(rank 1\): /);
  } finally {
    await tp!.shutdown();
    backend.dispose();
  }
});
