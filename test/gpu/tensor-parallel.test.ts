// Tensor parallelism on 2 GPUs (skipped on fewer), through the LLM class as users start it: the demo model's greedy
// transcripts at -tp 2 with CUDA graphs, whose small all-reduces take the one-shot peer kernel (the other rank a
// child process: its region mapped by CUDA IPC), against -tp 2 over NCCL alone, eager and in graphs, and -tp 1.
// Every engine must also close: a graph that captured an NCCL collective kept ncclCommDestroy waiting for ever
// until the graphs were released first (session 31). A rank killed mid-generation ends the engine naming it.
//   npm run build && node scripts/run-tests.mjs --gpu tensor-parallel

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { defaultModelDir } from '../../src/loader/default-model.js';
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

test('-tp 2 on CUDA: a rank killed mid-generation ends the engine with its name (a step\'s error, or the watchdog\'s ' +
  'kill while rank 0 waits on it), never a hang', { skip, timeout: 300_000 }, async (t) => {
  const llmUrl = new URL('../../src/engine/llm.js', import.meta.url).href;
  // generations in a loop until one fails; the follower is killed from outside at some point of a step or between
  const script = `
    import { spawnSync } from 'node:child_process';
    import { LLM } from ${JSON.stringify(llmUrl)};
    const llm = new LLM(${JSON.stringify(defaultModelDir())}, { backend: 'cuda', tensorParallelSize: 2, maxModelLen: 512 });
    await llm.generate(['warm up'], { maxTokens: 2 });
    const ps = spawnSync('ps', ['-o', 'pid=,args=', '--ppid', String(process.pid)], { encoding: 'utf8' }).stdout;
    console.log('followers ' + ps.split('\\n').filter((l) => l.includes('follower-main')).map((l) => l.trim().split(' ')[0]).join(','));
    try {
      for (;;) await llm.generate(Array(16).fill('Once upon a time'), { maxTokens: 400, temperature: 0, ignoreEos: true });
    } catch (e) {
      console.log('failed: ' + e.message);
      process.exit(0);
    }`;
  const child = spawn(process.execPath, ['--input-type=module', '-e', script], { stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, NCCL_NVLS_ENABLE: '0' } });
  let [stdout, stderr] = ['', ''];
  child.stderr.on('data', (d: Buffer) => { stderr += d.toString(); });
  const ended = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.on('close', (code, signal) => resolve({ code, signal })));
  const follower = await new Promise<number>((resolve, reject) => {
    child.stdout.on('data', (d: Buffer) => {
      stdout += d.toString();
      const m = /followers (\d+)/.exec(stdout);
      if (m) resolve(Number(m[1]));
    });
    void ended.then(() => reject(new Error(`ended before it started: ${stderr.slice(-2000)}`)));
  });
  await new Promise((r) => setTimeout(r, 1500));  // mid-generation
  process.kill(follower, 'SIGKILL');
  const killedAt = Date.now();
  let timer: NodeJS.Timeout | undefined;
  const end = await Promise.race([ended, new Promise<null>((r) => { timer = setTimeout(() => r(null), 60_000); })]);
  clearTimeout(timer);  // else this file's process waits out the minute (session 35)
  if (end === null) child.kill('SIGKILL');
  t.diagnostic(`ended ${JSON.stringify(end)} ${Date.now() - killedAt} ms after the kill; stdout ${stdout.trim()}; ` +
    `stderr tail ${stderr.slice(-400)}`);
  assert.ok(end !== null, 'the engine hung after a rank was killed');
  const byWatchdog = end.signal === 'SIGKILL' && /rank 1.*exited, and a collective waiting on it would never end/.test(stderr);
  const byStep = end.code === 0 && /failed: .*rank 1/.test(stdout);
  assert.ok(byWatchdog || byStep, `neither the watchdog's message nor a step error naming rank 1: ${stdout} ${stderr.slice(-1000)}`);
});
