// DataParallelClient over fake replicas: what it does with requests, aborts, stats and failures, and the start-up
// checks (a data-parallel size larger than the CUDA devices is an error naming both numbers, before any replica
// starts). test/engine/data-parallel-engine.test.ts runs the same against real engines in worker threads.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { DataParallelClient, dataParallelBackend, type Replica } from '../../src/engine/data-parallel-client.js';
import { engineOptions, type EngineOptions } from '../../src/engine/options.js';
import { OutputRouter } from '../../src/engine/output-stream.js';
import { emptyStats } from '../../src/engine/stats.js';
import type { EngineOutput, EngineRequest, EngineStats } from '../../src/engine/types.js';
import type { EngineInfo } from '../../src/engine/worker-protocol.js';
import { defaultSamplingParams } from '../../src/sampling/params.js';
import { AFFINITY_SLACK } from '../../src/engine/data-parallel-routing.js';

const INFO: EngineInfo = {
  backend: 'cpu', device: 'cpu', numBlocks: 101, numStateSlots: 0, bytesPerStateSlot: 0, numCachedStateSlots: 0,
  blockSize: 4, maxModelLen: 256, vocabSize: 500, loadMs: 1, weightBytesPerStep: 0, kvBytesPerToken: 0,
  maxNumBatchedTokens: 64, maxNumSeqs: 8,
};

/** A replica that records what it is asked, and finishes or fails requests when the test says so. */
class FakeReplica implements Replica {
  readonly router = new OutputRouter();
  readonly added: string[] = [];
  readonly aborted: string[] = [];
  onOutputs: ((outputs: readonly EngineOutput[]) => void) | null = null;
  onFailure: ((message: string) => void) | null = null;
  error: string | null = null;
  numShutdowns = 0;
  current: EngineStats = emptyStats();

  constructor(readonly info: EngineInfo = INFO) {}

  generate(req: EngineRequest): AsyncIterable<EngineOutput> {
    this.added.push(req.requestId);
    return this.router.open(req.requestId);
  }

  abort(requestId: string): void {
    this.aborted.push(requestId);
    this.emit([{ requestId, newTokenIds: [], finished: true, finishReason: 'abort' }]);
  }

  /** Outputs arrive as a worker's message would bring them. */
  emit(outputs: EngineOutput[]): void {
    this.onOutputs?.(outputs);
    this.router.route(outputs);
  }

  finish(requestId: string): void {
    this.emit([{ requestId, newTokenIds: [1], finished: true, finishReason: 'length' }]);
  }

  stats(): EngineStats {
    return this.current;
  }

  fail(message: string): void {
    const first = this.error === null;
    this.error ??= message;
    this.router.failAll(message);
    if (first) this.onFailure?.(message);
  }

  async probe(): Promise<number | null> {
    return null;
  }

  async shutdown(): Promise<void> {
    this.numShutdowns++;
  }

  async shutdownWithTrace(): Promise<string | null> {
    this.numShutdowns++;
    return null;
  }
}

function request(id: string, prompt: number[], maxTokens = 8): EngineRequest {
  return { requestId: id, promptTokenIds: prompt, sampling: { ...defaultSamplingParams(), maxTokens },
    priority: 0, cacheSalt: null, arrivalTime: 0 };
}

/** Distinct prompts (no block in common). */
const own = (k: number, length = 9) => Array.from({ length }, (_, i) => 100 + k * 20 + i);

async function drain(stream: AsyncIterable<EngineOutput>): Promise<EngineOutput[]> {
  const out: EngineOutput[] = [];
  for await (const o of stream) out.push(o);
  return out;
}

function client(n: number, enablePrefixCaching = true): { dp: DataParallelClient; replicas: FakeReplica[] } {
  const replicas = Array.from({ length: n }, () => new FakeReplica());
  return { dp: new DataParallelClient(replicas, { enablePrefixCaching }), replicas };
}

test('each new request goes to the replica with the fewest requests in flight, counted at submit and finish', () => {
  const { dp, replicas } = client(3);
  for (const id of ['a', 'b', 'c', 'd']) dp.generate(request(id, own(id.charCodeAt(0))));
  assert.deepEqual(replicas.map((r) => r.added), [['a', 'd'], ['b'], ['c']]);
  assert.deepEqual(dp.replicaLoads.map((l) => l.numRequests), [2, 1, 1]);
  replicas[2]!.finish('c');
  replicas[1]!.finish('b');
  assert.deepEqual(dp.replicaLoads.map((l) => l.numRequests), [2, 0, 0], 'a finish gives the load back at once');
  dp.generate(request('e', own(5)));
  dp.generate(request('f', own(6)));
  assert.deepEqual(replicas.map((r) => r.added.at(-1)), ['d', 'e', 'f']);
  assert.equal(dp.ownerOf('f'), 2);
  assert.equal(dp.ownerOf('b'), null);
});

test('among replicas of equal request counts, the one with fewer tokens promised', () => {
  const { dp, replicas } = client(2);
  dp.generate(request('long', own(1, 9), 500));
  dp.generate(request('short', own(2, 9), 10));
  dp.generate(request('next', own(3, 9), 10));
  assert.deepEqual(replicas.map((r) => r.added), [['long'], ['short', 'next']]);
});

test('prefix affinity: a request sharing a cached prefix goes to its replica unless that one is overloaded', () => {
  const { dp, replicas } = client(2);
  const prefix = Array.from({ length: 12 }, (_, i) => i + 1);  // 3 full blocks of 4
  dp.generate(request('p0', [...prefix, 50]));
  assert.equal(dp.ownerOf('p0'), 0);
  // replica 1 is idle, yet the shared prefix wins while replica 0 is within the slack
  for (let k = 1; k <= AFFINITY_SLACK; k++) {
    dp.generate(request(`p${k}`, [...prefix, 50 + k]));
    assert.equal(dp.ownerOf(`p${k}`), 0, `p${k}: load ${k} against 0`);
  }
  dp.generate(request('over', [...prefix, 99]));
  assert.equal(dp.ownerOf('over'), 1, 'beyond the slack it goes to the least loaded');
  // which is now the prefix's replica: the next one goes there too
  dp.generate(request('after', [...prefix, 98]));
  assert.equal(dp.ownerOf('after'), 1);
  assert.equal(replicas[1]!.added.length, 2);
  // a prompt shorter than a block has no prefix to follow: least loaded
  dp.generate(request('tiny', [1, 2, 3]));
  assert.equal(dp.ownerOf('tiny'), 1);
});

test('prefix caching off: no affinity, least load only', () => {
  const { dp } = client(2, false);
  const prefix = Array.from({ length: 12 }, (_, i) => i + 1);
  dp.generate(request('a', [...prefix, 50]));
  dp.generate(request('b', [...prefix, 51]));
  assert.deepEqual([dp.ownerOf('a'), dp.ownerOf('b')], [0, 1]);
});

test('abort goes to the replica that owns the request, and its load is given back', async () => {
  const { dp, replicas } = client(2);
  const a = dp.generate(request('a', own(1)));
  const b = dp.generate(request('b', own(2)));
  dp.abort('b');
  assert.deepEqual(replicas.map((r) => r.aborted), [[], ['b']]);
  assert.deepEqual((await drain(b)).map((o) => o.finishReason), ['abort']);
  assert.deepEqual(dp.replicaLoads.map((l) => l.numRequests), [1, 0]);
  dp.abort('nobody');
  assert.deepEqual(replicas.map((r) => r.aborted), [[], ['b']], 'an unknown id goes nowhere');
  replicas[0]!.finish('a');
  assert.equal((await drain(a)).length, 1);
  assert.throws(() => { dp.generate(request('x', own(3))); dp.generate(request('x', own(4))); }, /already running/);
});

test('stats: counters and gauges summed over the replicas, KV usage weighted by each one\'s pages', () => {
  const { dp, replicas } = client(2);
  replicas[0]!.current = { ...emptyStats(), numRunning: 3, numWaiting: 1, numTotalBlocks: 101, numFreeBlocks: 25,
    kvCacheUsage: 0.75, prefixCacheHits: 10, prefixCacheQueries: 40, numGenerationTokens: 100, numSteps: 7, executeMs: 5 };
  replicas[1]!.current = { ...emptyStats(), numRunning: 1, numWaiting: 0, numTotalBlocks: 301, numFreeBlocks: 225,
    kvCacheUsage: 0.25, prefixCacheHits: 2, prefixCacheQueries: 60, numGenerationTokens: 50, numSteps: 9, executeMs: 4,
    specDecoding: { numDrafts: 2, numDraftTokens: 6, numAcceptedTokens: 3, numAcceptedTokensPerPos: [2, 1, 0] } };
  const s = dp.stats();
  assert.equal(s.numRunning, 4);
  assert.equal(s.numWaiting, 1);
  assert.equal(s.numTotalBlocks, 402);
  assert.equal(s.numFreeBlocks, 250);
  assert.equal(s.prefixCacheHits, 12);
  assert.equal(s.prefixCacheQueries, 100);
  assert.equal(s.numGenerationTokens, 150);
  assert.equal(s.numSteps, 16);
  assert.equal(s.executeMs, 9);
  // 75 of 100 usable pages and 75 of 300: 150 of 400, not the mean of the fractions (0.5)
  assert.equal(s.kvCacheUsage, 150 / 400);
  assert.deepEqual(s.specDecoding, { numDrafts: 2, numDraftTokens: 6, numAcceptedTokens: 3, numAcceptedTokensPerPos: [2, 1, 0] });
  assert.deepEqual(dp.replicaStats().map((r) => r.numRunning), [3, 1]);
});

test('the engine info is the smallest replica\'s pool (a request must fit wherever it goes)', () => {
  const dp = new DataParallelClient([new FakeReplica({ ...INFO, numBlocks: 300 }), new FakeReplica({ ...INFO, numBlocks: 90 })],
    { enablePrefixCaching: true });
  assert.equal(dp.info.numBlocks, 90);
  assert.equal(dp.info.device, '2 x cpu');
});

test('a failing replica fails the engine: every request ends with an error naming it, and the replicas stop', async () => {
  const { dp, replicas } = client(3);
  const failures: string[] = [];
  dp.onFailure = (m) => failures.push(m);
  const streams = ['a', 'b', 'c'].map((id, k) => dp.generate(request(id, own(k))));
  replicas[1]!.fail('data-parallel replica 1 failed: engine worker exited with code 1');
  const ends = await Promise.all(streams.map(drain));
  for (const end of ends) {
    assert.equal(end.at(-1)!.finishReason, 'error');
    assert.match(end.at(-1)!.error!, /data-parallel replica 1 failed: engine worker exited with code 1/);
  }
  assert.deepEqual(failures, ['data-parallel replica 1 failed: engine worker exited with code 1']);
  assert.match(dp.error!, /replica 1/);
  assert.deepEqual(replicas.map((r) => r.numShutdowns), [1, 1, 1]);
  const late = await drain(dp.generate(request('late', own(4))));
  assert.equal(late[0]!.finishReason, 'error');
  assert.match(late[0]!.error!, /replica 1/);
  assert.deepEqual(replicas.map((r) => r.added.length), [1, 1, 1], 'nothing more is sent to a failed engine');
  // a replica message without its name gets it
  const other = client(2);
  other.replicas[0]!.fail('out of memory');
  assert.equal(other.dp.error, 'data-parallel replica 0 failed: out of memory');
});

test('shutdown stops every replica, once', async () => {
  const { dp, replicas } = client(3);
  await Promise.all([dp.shutdown(), dp.shutdown()]);
  assert.deepEqual(replicas.map((r) => r.numShutdowns), [1, 1, 1]);
});

const opts = (o: Partial<EngineOptions>) => engineOptions({ model: '/m', ...o });

test('more replicas than CUDA devices: a start-up error naming both numbers, before any replica starts', async () => {
  const one = () => ({ ok: true as const, numDevices: 1 });
  await assert.rejects(dataParallelBackend(2, 'cuda', 0, one),
    /--data-parallel-size 2 needs 2 CUDA devices \(one per replica\), but 1 is visible/);
  await assert.rejects(dataParallelBackend(2, 'auto', 0, one), /needs 2 CUDA devices.*but 1 is visible/,
    'auto with too few GPUs does not fall back to the CPU');
  await assert.rejects(dataParallelBackend(4, 'cuda', 0, () => ({ ok: true, numDevices: 3 })), /needs 4 CUDA devices.*but 3 are visible/);
  await assert.rejects(dataParallelBackend(2, 'cuda', 1, () => ({ ok: true, numDevices: 2 })), /from device 1 on \(3 in all\), but 2 are visible/);
  assert.equal(await dataParallelBackend(2, 'cuda', 0, () => ({ ok: true, numDevices: 2 })), 'cuda');
  // a replica of pipeline stages takes a device a rank: tp x pp of them
  await assert.rejects(dataParallelBackend(2, 'cuda', 0, () => ({ ok: true, numDevices: 6 }), 1, 4),
    /--data-parallel-size 2 needs 8 CUDA devices \(4 per replica: --pipeline-parallel-size\), but 6 are visible/);
  assert.equal(await dataParallelBackend(2, 'cuda', 0, () => ({ ok: true, numDevices: 8 }), 2, 2), 'cuda');
  assert.equal(await dataParallelBackend(2, 'auto', 0, () => ({ ok: true, numDevices: 8 })), 'cuda');
  assert.equal(await dataParallelBackend(3, 'auto', 0, () => ({ ok: false, reason: 'no CUDA device' })), 'cpu');
  await assert.rejects(dataParallelBackend(2, 'cuda', 0, () => ({ ok: false, reason: 'no CUDA device' })), /needs 2 CUDA devices.*no CUDA device/);
  assert.equal(await dataParallelBackend(16, 'cpu', 0, () => { throw new Error('the CPU needs no probe'); }), 'cpu');

  let started = 0;
  await assert.rejects(DataParallelClient.start(opts({ backend: 'cuda', dataParallelSize: 2 }), {
    probeCuda: one, startReplica: async () => { started++; return new FakeReplica(); },
  }), /needs 2 CUDA devices.*but 1 is visible/);
  assert.equal(started, 0);
});

test('start: replica i on device ordinal i with the backend decided once; a replica that fails to load stops the others', async () => {
  const seen: { backend: string; deviceOrdinal: number; label: string }[] = [];
  const made: FakeReplica[] = [];
  const dp = await DataParallelClient.start(opts({ backend: 'auto', dataParallelSize: 3 }), {
    probeCuda: () => ({ ok: true, numDevices: 3 }),
    startReplica: async (o, label) => {
      seen.push({ backend: o.backend, deviceOrdinal: o.deviceOrdinal, label });
      const r = new FakeReplica();
      made.push(r);
      return r;
    },
  });
  assert.equal(dp.replicas.length, 3);
  assert.deepEqual(seen, [0, 1, 2].map((i) => ({ backend: 'cuda', deviceOrdinal: i, label: `data-parallel replica ${i}` })));

  const loaded: FakeReplica[] = [];
  await assert.rejects(DataParallelClient.start(opts({ backend: 'cpu', dataParallelSize: 3 }), {
    startReplica: async (o) => {
      if (o.deviceOrdinal === 1) throw new Error('weights missing');
      const r = new FakeReplica();
      loaded.push(r);
      return r;
    },
  }), /data-parallel replica 1 failed to load: weights missing/);
  assert.deepEqual(loaded.map((r) => r.numShutdowns), [1, 1]);
  await assert.rejects(DataParallelClient.start(opts({ dataParallelSize: 0 })), /data parallel size .* must be a positive integer, got 0/);
});
