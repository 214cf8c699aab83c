// Tensor parallelism on 2 GPUs (skipped on fewer), through the LLM class as users start it: the demo model's greedy
// transcripts at -tp 2 with CUDA graphs, whose small all-reduces take the one-shot peer kernel (the other rank a
// child process: its region mapped by CUDA IPC), against -tp 2 over NCCL alone, eager and in graphs, and -tp 1.
// Every engine must also close: a graph that captured an NCCL collective kept ncclCommDestroy waiting for ever
// until the graphs were released first (session 31).
//   npm run build && node scripts/run-tests.mjs --gpu tensor-parallel

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { cudaAvailable } from '../../src/backend/cuda/probe.js';
import { transcriptMd5 } from '../../src/lab/gate-transcript.js';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { makeTestModel } from '../../src/tools/make-test-model.js';
import { transcripts } from './tp-prompts.js';

const probe = cudaAvailable();
const skip = !probe.ok ? `no CUDA device: ${probe.reason}`
  : probe.numDevices < 2 ? `needs 2 CUDA devices, found ${probe.numDevices}` : false;

test('-tp 2 on CUDA: the peer kernel\'s transcripts are NCCL\'s, eager or in graphs, and near -tp 1\'s; every engine closes',
  { skip, timeout: 600_000 }, async (t) => {
    const tp1 = await transcripts({});
    const peer = await transcripts({ tensorParallelSize: 2 });
    const ncclGraphs = await transcripts({ tensorParallelSize: 2, disableCustomAllReduce: true });
    const ncclEager = await transcripts({ tensorParallelSize: 2, disableCustomAllReduce: true, enforceEager: true });
    t.diagnostic(`md5 tp1 ${transcriptMd5(tp1)}, tp2 peer ${transcriptMd5(peer)}, tp2 NCCL graphs ${transcriptMd5(ncclGraphs)}, ` +
      `tp2 NCCL eager ${transcriptMd5(ncclEager)}`);
    // a sum of two bf16 values in f32, rounded once to bf16, is what NCCL's 2-rank sum gives: the same bits
    assert.deepEqual(peer, ncclGraphs, 'peer kernel against NCCL, both in graphs');
    assert.deepEqual(ncclGraphs, ncclEager, 'NCCL in graphs against eager');
    // -tp 1 sums each projection's products in one GEMM, -tp 2 in two halves and an all-reduce: near, not the same bits
    const same = tp1.reduce((a, row, i) => a + row.filter((x, j) => x === peer[i]![j]).length, 0);
    const total = tp1.flat().length;
    t.diagnostic(`${same} of ${total} tokens as -tp 1`);
    assert.ok(same >= 0.75 * total, `${same} of ${total} tokens as -tp 1`);
  });

test('-tp 2 on CUDA, a hybrid (gated DeltaNet + gated attention): near -tp 1, the peer kernel\'s transcripts NCCL\'s',
  { skip, timeout: 600_000 }, async (t) => {
    // tiny-qwen3.5-128: DeltaNet heads split by key heads (and their value heads), attention by query heads
    const dir = mkdtempSync(join(tmpdir(), 'quire-gpu-tp-hybrid-'));
    try {
      await makeTestModel({ shape: 'tiny-qwen3.5-128', outDir: dir, dtype: 'bf16', seed: 0 });
      const tp1 = await transcripts({}, dir);
      const peer = await transcripts({ tensorParallelSize: 2 }, dir);
      const nccl = await transcripts({ tensorParallelSize: 2, disableCustomAllReduce: true }, dir);
      t.diagnostic(`md5 tp1 ${transcriptMd5(tp1)}, tp2 peer ${transcriptMd5(peer)}, tp2 NCCL ${transcriptMd5(nccl)}`);
      assert.deepEqual(peer, nccl, 'peer kernel against NCCL');
      const same = tp1.reduce((a, row, i) => a + row.filter((x, j) => x === peer[i]![j]).length, 0);
      const total = tp1.flat().length;
      t.diagnostic(`${same} of ${total} tokens as -tp 1`);
      // random weights: near-ties flip sooner than the demo model's; a split that mixed heads would agree on few
      assert.ok(same >= 0.5 * total, `${same} of ${total} tokens as -tp 1`);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
