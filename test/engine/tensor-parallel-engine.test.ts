// A tensor-parallel engine on the CPU backend (engine/tp/: rank 0 in the engine, the other ranks in worker threads
// following each step's DeviceStep, all-reduces in shared memory): its greedy tokens are one engine's, with the
// prefix cache, chunked prompts and several sequences a step, a hybrid model's too; sizes the model does not split
// by are refused naming the field before any rank starts (mixtures of experts: expert-parallel-engine.test.ts).

import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createEngineCore } from '../../src/engine/create-engine.js';
import { LLM } from '../../src/engine/llm.js';
import { engineOptions } from '../../src/engine/options.js';
import { peerOption } from '../../src/engine/tp/leader.js';
import { loadModel } from '../../src/loader/model-dir.js';
import { makeTestModel } from '../../src/tools/make-test-model.js';

const root = mkdtempSync(join(tmpdir(), 'quire-tp-'));
before(async () => {
  await makeTestModel({ shape: 'tiny-qwen3', outDir: join(root, 'qwen3'), dtype: 'f32', seed: 11 });
  await makeTestModel({ shape: 'tiny-qwen3.5', outDir: join(root, 'hybrid'), dtype: 'f32', seed: 11 });
});
after(() => rmSync(root, { recursive: true, force: true }));

const prompts = ['The quick brown fox', 'Once upon a time in a land far away, there lived', 'The quick brown fox jumps'];

async function greedy(tensorParallelSize: number, extra: Record<string, unknown> = {}, model = 'qwen3'): Promise<number[][]> {
  const llm = new LLM(join(root, model), { backend: 'cpu', cpuThreads: 1, maxModelLen: 256, tensorParallelSize,
    enablePrefixCaching: true, ...extra });
  try {
    const out = await llm.generate(prompts, { maxTokens: 12, temperature: 0, ignoreEos: true });
    return out.map((c) => c.tokenIds);
  } finally {
    await llm.close();
  }
}

test('-tp 2 and -tp 4 give one engine\'s greedy tokens (chunked prompts, prefix hits, batched rows)', async () => {
  const one = await greedy(1, { maxNumBatchedTokens: 8 });
  assert.deepEqual(await greedy(2, { maxNumBatchedTokens: 8 }), one);
  assert.deepEqual(await greedy(4), one);
});

test('a hybrid model (Qwen3.5: DeltaNet layers, their state slots) at -tp 2 gives one engine\'s greedy tokens', async () => {
  const one = await greedy(1, { maxNumBatchedTokens: 8 }, 'hybrid');
  assert.deepEqual(await greedy(2, { maxNumBatchedTokens: 8 }, 'hybrid'), one);
});

test('a size the model does not split by is refused naming it', async () => {
  await assert.rejects(() => greedy(3), /--tensor-parallel-size 3: num_attention_heads \(4\) is not divisible by the tensor-parallel size \(3\)/);
});

test('a rank that fails to load ends the start-up with its error, naming the rank (no hang)', async () => {
  // rank 0 is handed the loaded model; the other ranks load options.model themselves, which here is gone
  const dir = await loadModel(join(root, 'qwen3'), engineOptions({ model: join(root, 'qwen3') }));
  const given = engineOptions({ model: join(root, 'missing'), backend: 'cpu', cpuThreads: 1, maxModelLen: 256, tensorParallelSize: 2 });
  await assert.rejects(() => createEngineCore(given, dir), /tensor-parallel rank 1: .*missing/);
});

test('a rank as a child process (QUIRE_TP_RANKS=process, CUDA\'s default) gets its init and reports its failure', async () => {
  const { startRank } = await import('../../src/engine/tp/rank-port.js');
  const init = { rank: 1, device: 1, peer: false, options: engineOptions({ model: join(root, 'missing'), backend: 'cpu' }),
    tp: { rank: 1, size: 2, comm: { kind: 'nccl' as const, id: new Uint8Array(128) } }, pp: { stage: 0, size: 1, layers: null, comm: null } };
  const port = startRank(init, 'process');
  const why = await new Promise<string>((resolve) => port.listen((m) => { if (m.type === 'failed') resolve(m.message); }, resolve));
  assert.match(why, /tensor-parallel rank 1: .*missing/);
  await port.terminate();
});

test('the one-shot peer all-reduce is off where asked (--disable-custom-all-reduce) or NCCL may not use peer memory', () => {
  const saved = process.env.NCCL_P2P_DISABLE;
  try {
    delete process.env.NCCL_P2P_DISABLE;
    assert.deepEqual(peerOption(engineOptions({ model: 'm' })), { peer: true });
    assert.deepEqual(peerOption(engineOptions({ model: 'm', disableCustomAllReduce: true })), { peer: false });
    process.env.NCCL_P2P_DISABLE = '1';
    assert.deepEqual(peerOption(engineOptions({ model: 'm' })), { peer: false });
  } finally {
    if (saved === undefined) delete process.env.NCCL_P2P_DISABLE; else process.env.NCCL_P2P_DISABLE = saved;
  }
});

test('close() resolves only once the other ranks have ended (LLM.close() leaves no rank running)', async () => {
  const core = await createEngineCore(engineOptions({ model: join(root, 'qwen3'), backend: 'cpu', cpuThreads: 1, tensorParallelSize: 2 }));
  const tp = (core as unknown as { tp: { shutdown(): Promise<void> } }).tp;
  let ended = false;
  const shutdown = tp.shutdown.bind(tp);
  tp.shutdown = async () => {
    await shutdown();
    ended = true;
  };
  await core.close();
  assert.ok(ended, 'close() resolved before the ranks\' shutdown');
});
