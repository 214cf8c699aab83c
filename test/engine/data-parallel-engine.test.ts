// A data-parallel engine of real engines (worker threads, CPU backend, a tiny random-weight Qwen3): requests are
// spread by load, follow their cached prefix unless its replica is overloaded, abort on their own replica (its pages
// freed), stats add up, shutdown ends every worker, and a replica whose worker dies ends every request with an
// error naming it. One replica is the plain worker client, as before.

import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Worker } from 'node:worker_threads';
import { DataParallelClient, startEngineClient } from '../../src/engine/data-parallel-client.js';
import { AFFINITY_SLACK } from '../../src/engine/data-parallel-routing.js';
import { LLM } from '../../src/engine/llm.js';
import { engineOptions } from '../../src/engine/options.js';
import type { EngineOutput, EngineRequest } from '../../src/engine/types.js';
import { WorkerEngineClient } from '../../src/engine/worker-client.js';
import { defaultSamplingParams } from '../../src/sampling/params.js';
import { makeTestModel } from '../../src/tools/make-test-model.js';

let dir = '';
before(async () => {
  dir = mkdtempSync(join(tmpdir(), 'quire-dp-'));
  await makeTestModel({ shape: 'tiny-qwen3', outDir: dir, dtype: 'f32', seed: 11 });
});
after(() => rmSync(dir, { recursive: true, force: true }));

const options = (dataParallelSize: number) => engineOptions({ model: dir, backend: 'cpu', cpuThreads: 1, maxModelLen: 512,
  kvCacheBytes: 8 * 1024 * 1024, dataParallelSize });

function request(id: string, prompt: number[], maxTokens: number): EngineRequest {
  return { requestId: id, promptTokenIds: prompt, sampling: { ...defaultSamplingParams(), maxTokens, temperature: 0, ignoreEos: true },
    priority: 0, cacheSalt: null, arrivalTime: Date.now() };
}

async function drain(stream: AsyncIterable<EngineOutput>): Promise<EngineOutput[]> {
  const out: EngineOutput[] = [];
  for await (const o of stream) out.push(o);
  return out;
}

const tokensOf = (outs: EngineOutput[]) => outs.flatMap((o) => o.newTokenIds);
/** `n` token ids of their own (prompts that share no block). */
const own = (seed: number, n: number) => Array.from({ length: n }, (_, i) => 5 + ((seed * 131 + i * 7) % 390));
const workerOf = (c: unknown) => (c as { worker: Worker }).worker;

describe('two replicas', () => {
  let dp: DataParallelClient;
  before(async () => {
    const client = await startEngineClient(options(2));
    assert.ok(client instanceof DataParallelClient, 'two replicas: the data-parallel client');
    dp = client;
  });
  after(() => dp.shutdown());

  test('requests go to the least-loaded replica; each replica computes its own; the stats add up', async () => {
    assert.equal(dp.replicas.length, 2);
    assert.ok(dp.replicas.every((r) => r instanceof WorkerEngineClient));
    const before = dp.replicaStats().map((s) => s.numGenerationTokens);
    const runs = ['a', 'b', 'c'].map((id, k) => drain(dp.generate(request(id, own(k + 1, 20), 12))));
    assert.deepEqual(['a', 'b', 'c'].map((id) => dp.ownerOf(id)), [0, 1, 0]);
    assert.deepEqual(dp.replicaLoads.map((l) => l.numRequests), [2, 1]);
    for (const outs of await Promise.all(runs)) {
      assert.equal(tokensOf(outs).length, 12);
      assert.equal(outs.at(-1)!.finishReason, 'length');
    }
    assert.deepEqual(dp.replicaLoads.map((l) => l.numRequests), [0, 0]);
    const per = dp.replicaStats().map((s, i) => s.numGenerationTokens - before[i]!);
    assert.deepEqual(per, [24, 12], 'replica 0 generated a and c, replica 1 b');
    const sum = dp.stats();
    assert.equal(sum.numGenerationTokens, dp.replicaStats().reduce((a, s) => a + s.numGenerationTokens, 0));
    assert.equal(sum.numTotalBlocks, dp.replicaStats().reduce((a, s) => a + s.numTotalBlocks, 0));
    assert.equal(sum.numRunning, 0);
  });

  test('a prompt sharing a cached prefix goes to the replica that holds it, and hits its cache', async () => {
    const prefix = own(40, 3 * dp.info.blockSize);
    const first = await drain(dp.generate(request('p-first', [...prefix, 1, 2], 2)));
    const home = 0;
    assert.equal(first.length > 0, true);
    // another request now loads that replica: without affinity the next one would go to the idle replica
    const busy = drain(dp.generate(request('busy', own(41, 20), 30)));
    assert.equal(dp.ownerOf('busy'), home);
    const second = dp.generate(request('p-second', [...prefix, 3, 4], 2));
    assert.equal(dp.ownerOf('p-second'), home);
    const outs = await drain(second);
    assert.ok((outs[0]!.numCachedTokens ?? 0) >= prefix.length, `the prefix came from the cache: ${outs[0]!.numCachedTokens}`);
    await busy;
  });

  test('with the prefix\'s replica overloaded beyond the slack, the request goes to the least loaded', async () => {
    const prefix = own(50, 3 * dp.info.blockSize);
    await drain(dp.generate(request('q-0', [...prefix, 1], 1)));
    const home = 0;
    const runs: Promise<EngineOutput[]>[] = [];
    for (let k = 1; k <= AFFINITY_SLACK + 1; k++) {
      runs.push(drain(dp.generate(request(`q-${k}`, [...prefix, 1 + k], 8))));
      assert.equal(dp.ownerOf(`q-${k}`), home, `q-${k} follows the prefix`);
    }
    const away = dp.generate(request('q-away', [...prefix, 99], 8));
    assert.equal(dp.ownerOf('q-away'), 1 - home, 'the prefix\'s replica is loaded beyond the slack');
    const outs = await drain(away);
    assert.equal(outs[0]!.numCachedTokens ?? 0, 0, 'the other replica had not seen the prefix');
    await Promise.all(runs);
  });

  test('abort goes to the replica that owns the request, which frees its pages', async () => {
    // one request on each replica, so that the aborted one's owner is not simply the only one
    const other = drain(dp.generate(request('keep', own(60, 20), 6)));
    const stream = dp.generate(request('gone', own(61, 60), 400));
    const owner = dp.ownerOf('gone')!;
    assert.equal(owner, 1);
    const calls: number[] = [];
    dp.replicas.forEach((r, i) => {
      const abort = r.abort.bind(r);
      r.abort = (id: string) => {
        calls.push(i);
        abort(id);
      };
    });
    const it = stream[Symbol.asyncIterator]();
    const firstOut = await it.next();
    assert.equal(firstOut.done, false);
    dp.abort('gone');
    let last = firstOut.value as EngineOutput;
    for (let r = await it.next(); !r.done; r = await it.next()) last = r.value;
    assert.equal(last.finishReason, 'abort');
    assert.deepEqual(calls, [owner]);
    assert.equal(dp.replicaLoads[owner]!.numRequests, 0);
    const s = dp.replicas[owner]!.stats();
    assert.equal(s.numRunning + s.numWaiting, 0);
    assert.equal(s.numFreeBlocks, s.numTotalBlocks - 1, 'every page of the owner is free (or only cached)');
    await other;
  });
});

test('shutdown ends every replica\'s worker, and a request still running ends rather than hangs', async () => {
  const dp = await DataParallelClient.start(options(2));
  const exits = dp.replicas.map((r) => once(workerOf(r), 'exit'));
  const running = drain(dp.generate(request('long', own(70, 30), 480)));
  await dp.shutdown();
  await Promise.all(exits);
  const outs = await running;
  assert.ok(outs.at(-1)!.finished);
});

test('a replica whose worker dies ends every request with an error naming it, and the engine stops', async () => {
  const dp = await DataParallelClient.start(options(2));
  const failures: string[] = [];
  dp.onFailure = (m) => failures.push(m);
  const exit0 = once(workerOf(dp.replicas[0]), 'exit');
  const runs = ['x', 'y'].map((id, k) => drain(dp.generate(request(id, own(80 + k, 20), 480))));
  assert.deepEqual([dp.ownerOf('x'), dp.ownerOf('y')], [0, 1]);
  await workerOf(dp.replicas[1]).terminate();
  for (const outs of await Promise.all(runs)) {
    assert.equal(outs.at(-1)!.finishReason, 'error');
    assert.match(outs.at(-1)!.error!, /data-parallel replica 1 failed: engine worker exited with code 1/);
  }
  assert.deepEqual(failures, ['data-parallel replica 1 failed: engine worker exited with code 1']);
  assert.match(dp.error!, /replica 1/);
  await exit0;  // the healthy replica was stopped too
  const late = await drain(dp.generate(request('late', own(90, 10), 4)));
  assert.match(late[0]!.error!, /replica 1/);
  await dp.shutdown();
});

test('one replica is today\'s engine: the worker client itself, no router in front', async () => {
  const client = await startEngineClient(options(1));
  try {
    assert.ok(client instanceof WorkerEngineClient);
    assert.ok(!(client instanceof DataParallelClient));
  } finally {
    await client.shutdown();
  }
});

test('the LLM class with data_parallel_size 2: two engines, the same greedy tokens as one', async () => {
  const prompts = [1, 2, 3, 4].map((k) => own(100 + k, 10 + 7 * k));
  const one = new LLM(dir, { backend: 'cpu', cpu_threads: 1, max_model_len: 512, kv_cache_bytes: 8 * 1024 * 1024 });
  const two = new LLM(dir, { backend: 'cpu', cpu_threads: 1, max_model_len: 512, kv_cache_bytes: 8 * 1024 * 1024,
    data_parallel_size: 2 });
  try {
    const a = await one.generate(prompts, { max_tokens: 6, temperature: 0, ignore_eos: true });
    const b = await two.generate(prompts, { max_tokens: 6, temperature: 0, ignore_eos: true });
    assert.deepEqual(b.map((c) => c.tokenIds), a.map((c) => c.tokenIds));
    assert.match(two.engineInfo().device, /^2 x /);
    assert.doesNotMatch(one.engineInfo().device, /^2 x /);
    assert.equal((await two.stats()).numGenerationTokens, 24);
    assert.equal(await two.copyBandwidth(), null, 'no bandwidth figure on the CPU');
  } finally {
    await Promise.all([one.close(), two.close()]);
  }
  assert.throws(() => new LLM(dir, { data_parallel_size: 0 }), /data parallel size .* must be a positive integer, got 0/);
});
