// Pipeline parallelism on 2 GPUs (skipped on fewer), through the LLM class as users start it: the demo model's greedy
// transcripts at -pp 2 (stage 1 with the engine on device 0, stage 0 a child process on device 1, the residual
// stream over NCCL send/recv, captured in the decode graphs of both stages), against -pp 1. In the batch-invariant
// mode the stage boundary's addRmsNorm is the op -pp 1 runs there (no chain GEMM fuses it) and a step's rows do not
// depend on the batch, so -pp 2 is -pp 1 bit for bit, micro-batched or one step at a time, eager or in graphs; in
// the default mode -pp 1 fuses that norm into the down projection's chain GEMM at decode (within bf16 rounding) and
// the micro-batches change the batches, so the transcripts are near, not the same. A hybrid model (a DeltaNet and an
// attention layer each stage) too, and -tp 2 x -pp 2 on 4 GPUs. Every engine must close (the graphs that captured
// a send or a receive released before the communicators).
//   npm run build && node scripts/run-tests.mjs --gpu pipeline-parallel

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { cudaAvailable } from '../../src/backend/cuda/probe.js';
import { transcriptMd5 } from '../../src/lab/gate-transcript.js';
import { makeTestModel } from '../../src/tools/make-test-model.js';
import { transcripts } from './tp-prompts.js';

const probe = cudaAvailable();
const devices = probe.ok ? probe.numDevices : 0;
const skip = !probe.ok ? `no CUDA device: ${probe.reason}` : devices < 2 ? `needs 2 CUDA devices, found ${devices}` : false;

/** Runs fn with QUIRE_PP_MICRO_BATCHES set (the engine reads it at start-up). */
async function withMicroBatches<T>(value: string, fn: () => Promise<T>): Promise<T> {
  const saved = process.env.QUIRE_PP_MICRO_BATCHES;
  process.env.QUIRE_PP_MICRO_BATCHES = value;
  try {
    return await fn();
  } finally {
    if (saved === undefined) delete process.env.QUIRE_PP_MICRO_BATCHES; else process.env.QUIRE_PP_MICRO_BATCHES = saved;
  }
}

const sameTokens = (a: number[][], b: number[][]): number => a.reduce((n, row, i) => n + row.filter((x, j) => x === b[i]![j]).length, 0);

test('-pp 2 on CUDA, batch-invariant: -pp 1\'s transcripts bit for bit, micro-batched or not, eager or in graphs; every engine closes',
  { skip, timeout: 900_000 }, async (t) => {
    const pp1 = await transcripts({ batchInvariant: true });
    const pp2 = await transcripts({ batchInvariant: true, pipelineParallelSize: 2 });
    const single = await withMicroBatches('1', () => transcripts({ batchInvariant: true, pipelineParallelSize: 2 }));
    const eager = await transcripts({ batchInvariant: true, pipelineParallelSize: 2, enforceEager: true });
    t.diagnostic(`md5 pp1 ${transcriptMd5(pp1)}, pp2 ${transcriptMd5(pp2)}, pp2 one step at a time ${transcriptMd5(single)}, ` +
      `pp2 eager ${transcriptMd5(eager)}`);
    assert.equal(transcriptMd5(pp2), transcriptMd5(pp1), '-pp 2 against -pp 1');
    assert.deepEqual(single, pp2, 'one step at a time against micro-batches');
    assert.deepEqual(eager, pp2, 'eager against graphs');
  });

test('-pp 2 on CUDA, default mode: near -pp 1 (the fused norm at decode, other batches)', { skip, timeout: 600_000 }, async (t) => {
  const pp1 = await transcripts({});
  const pp2 = await transcripts({ pipelineParallelSize: 2 });
  const same = sameTokens(pp1, pp2);
  const total = pp1.flat().length;
  t.diagnostic(`md5 pp1 ${transcriptMd5(pp1)}, pp2 ${transcriptMd5(pp2)}; ${same} of ${total} tokens as -pp 1`);
  assert.ok(same >= 0.75 * total, `${same} of ${total} tokens as -pp 1`);
});

test('-pp 2 on CUDA, a hybrid (gated DeltaNet + gated attention in each stage): near -pp 1', { skip, timeout: 600_000 }, async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'quire-gpu-pp-hybrid-'));
  try {
    await makeTestModel({ shape: 'tiny-qwen3.5-128', outDir: dir, dtype: 'bf16', seed: 0 });
    const pp1 = await transcripts({ batchInvariant: true }, dir);
    const pp2 = await transcripts({ batchInvariant: true, pipelineParallelSize: 2 }, dir);
    const same = sameTokens(pp1, pp2);
    const total = pp1.flat().length;
    t.diagnostic(`md5 pp1 ${transcriptMd5(pp1)}, pp2 ${transcriptMd5(pp2)}; ${same} of ${total} tokens as -pp 1`);
    // random weights: near-ties flip sooner than the demo model's; a stage that lost its states would agree on few
    assert.ok(same >= 0.5 * total, `${same} of ${total} tokens as -pp 1`);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('-tp 2 x -pp 2 on CUDA (4 GPUs): -tp 2\'s transcripts in the batch-invariant mode', {
  skip: skip || (devices < 4 ? `needs 4 CUDA devices, found ${devices}` : false), timeout: 600_000 }, async (t) => {
  const tp2 = await transcripts({ batchInvariant: true, tensorParallelSize: 2, disableCustomAllReduce: true });
  const both = await transcripts({ batchInvariant: true, tensorParallelSize: 2, pipelineParallelSize: 2, disableCustomAllReduce: true });
  t.diagnostic(`md5 tp2 ${transcriptMd5(tp2)}, tp2 x pp2 ${transcriptMd5(both)}`);
  assert.equal(transcriptMd5(both), transcriptMd5(tp2));
});
