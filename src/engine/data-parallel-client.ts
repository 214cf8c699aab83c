// A data-parallel engine (vLLM's --data-parallel-size N): N whole engines, each an EngineCore in its own worker
// thread (WorkerEngineClient) on its own device (replica i on CUDA device deviceOrdinal + i), behind one
// EngineClient. Each new request goes to one replica and stays there (data-parallel-routing.ts: the least-loaded
// one, unless the replica holding its prompt's prefix in its cache is within a small slack of that); abort() goes to
// the replica that owns the request; stats() are the replicas' summed (stats.ts sumStats), each replica's also
// available for the per-engine metrics.
//
// The replicas share nothing, so a step of one never waits for another: N GPUs give up to N times the throughput
// of one, as long as the requests spread evenly, which is the router's job. A replica that fails fails the whole
// engine, as vLLM's data-parallel group does: its requests end with its error, the other replicas' requests end
// with the same error, the replicas stop, and onFailure tells the owner (quire serve exits naming the replica).
// With one replica nothing of this is used: startEngineClient returns the plain WorkerEngineClient, and the LLM
// class keeps its in-process engine.

import type { CudaProbe } from '../backend/cuda/probe.js';
import type { EngineClient } from './client.js';
import { prefixBlockHashes, pickReplica, PrefixAffinity, type ReplicaLoad } from './data-parallel-routing.js';
import { worldSize, type BackendKind, type EngineOptions } from './options.js';
import { OutputStream } from './output-stream.js';
import { sumStats } from './stats.js';
import type { EngineOutput, EngineRequest, EngineStats } from './types.js';
import { WorkerEngineClient } from './worker-client.js';
import type { EngineInfo, ProbeKind } from './worker-protocol.js';

/** What the data-parallel client needs of one replica (WorkerEngineClient is one; tests pass fakes). */
export interface Replica extends EngineClient {
  readonly info: EngineInfo;
  readonly error: string | null;
  /** Sees each batch of outputs as it arrives, before the request streams do. */
  onOutputs: ((outputs: readonly EngineOutput[]) => void) | null;
  /** Called once, when the replica fails; the message names it. */
  onFailure: ((message: string) => void) | null;
  /** Ends every request in flight with `message` and refuses new ones. */
  fail(message: string): void;
  probe(what: ProbeKind): Promise<number | null>;
  /** Stops it; resolves with its admission trace summary when one was recorded. */
  shutdownWithTrace(): Promise<string | null>;
}

/** How replicas start and how many CUDA devices there are: the real ones by default, injected by tests. */
export interface DataParallelDeps {
  probeCuda?: () => CudaProbe | Promise<CudaProbe>;
  startReplica?: (options: EngineOptions, label: string) => Promise<Replica>;
}

/** A replica's name in messages and logs (as vLLM's per-engine `engine` label counts them, from 0). */
export function replicaLabel(i: number): string {
  return `data-parallel replica ${i}`;
}

/** Refuses a data-parallel size that is not a positive integer (the LLM class's option; the CLI's parser refuses first). */
export function checkDataParallelSize(n: unknown): number {
  if (typeof n !== 'number' || !Number.isInteger(n) || n < 1) {
    throw new RangeError(`data parallel size (--data-parallel-size, data_parallel_size) must be a positive integer, got ${String(n)}`);
  }
  return n;
}

/**
 * The backend every replica runs on. A CPU backend takes any number of replicas (how tests run them); CUDA needs a
 * device each, devices firstOrdinal .. firstOrdinal + size - 1: fewer is an error naming both numbers before any
 * replica starts (never a replica failing late, or waiting on a device it cannot have). Under 'auto' with no CUDA
 * at all the replicas run on the CPU, as one engine would; with some GPUs but too few it is the same error, not a
 * silent fall back to the CPU. The replicas then ask for 'cuda' itself, so none of them falls back alone.
 */
export async function dataParallelBackend(size: number, backend: BackendKind, firstOrdinal: number,
  probeCuda: () => CudaProbe | Promise<CudaProbe>, tensorParallelSize = 1, pipelineParallelSize = 1): Promise<'cpu' | 'cuda'> {
  if (backend === 'cpu') return 'cpu';
  const probe = await probeCuda();
  if (!probe.ok) {
    if (backend === 'auto') return 'cpu';
    throw new Error(`--data-parallel-size ${size} needs ${size} CUDA devices (one per replica), but CUDA is not usable: ${probe.reason}`);
  }
  const ranks = tensorParallelSize * pipelineParallelSize;
  const needed = firstOrdinal + size * ranks;
  if (probe.numDevices < needed) {
    const from = firstOrdinal > 0 ? ` from device ${firstOrdinal} on (${needed} in all)` : '';
    const flags = [tensorParallelSize > 1 ? '--tensor-parallel-size' : '', pipelineParallelSize > 1 ? '--pipeline-parallel-size' : '']
      .filter((f) => f !== '').join(' x ');
    const per = ranks > 1 ? `${ranks} per replica: ${flags}` : 'one per replica';
    throw new Error(`--data-parallel-size ${size} needs ${size * ranks} CUDA devices (${per})${from}, but `
      + `${probe.numDevices} ${probe.numDevices === 1 ? 'is' : 'are'} visible (CUDA_VISIBLE_DEVICES decides which): `
      + `lower --data-parallel-size to ${Math.max(1, probe.numDevices - firstOrdinal)} or make more devices visible`);
  }
  return 'cuda';
}

/** The engine of `quire serve` and serve(): one worker as ever, or a data-parallel engine over several. */
export async function startEngineClient(options: EngineOptions, deps: DataParallelDeps = {}):
  Promise<WorkerEngineClient | DataParallelClient> {
  if (checkDataParallelSize(options.dataParallelSize) === 1) return WorkerEngineClient.start(options);
  return DataParallelClient.start(options, deps);
}

interface Owned {
  replica: number;
  numTokens: number;
}

export class DataParallelClient implements EngineClient {
  /** The replicas' shared facts: the smallest KV pool (a request must fit whichever replica it goes to). */
  readonly info: EngineInfo;
  /** Called once when a replica fails, with the message naming it (after every request has ended). */
  onFailure: ((message: string) => void) | null = null;
  private readonly loads: ReplicaLoad[];
  private readonly owners = new Map<string, Owned>();
  private readonly affinity = new PrefixAffinity();
  private failure: string | null = null;
  private stopping: Promise<string | null> | null = null;

  constructor(readonly replicas: readonly Replica[], private readonly options: { enablePrefixCaching: boolean }) {
    if (replicas.length === 0) throw new Error('a data-parallel engine needs at least one replica');
    this.loads = replicas.map(() => ({ numRequests: 0, numTokens: 0 }));
    replicas.forEach((r, i) => {
      r.onOutputs = (outputs) => {
        for (const o of outputs) if (o.finished) this.settle(o.requestId);
      };
      r.onFailure = (message) => this.replicaFailed(i, message);
    });
    this.info = mergedInfo(replicas.map((r) => r.info));
  }

  /** Starts `options.dataParallelSize` replicas at once; a replica that fails to load stops the others. */
  static async start(options: EngineOptions, deps: DataParallelDeps = {}): Promise<DataParallelClient> {
    const size = checkDataParallelSize(options.dataParallelSize);
    const probeCuda = deps.probeCuda ?? (async () => (await import('../backend/cuda/probe.js')).cudaAvailable());
    const backend = await dataParallelBackend(size, options.backend, options.deviceOrdinal, probeCuda, options.tensorParallelSize,
      options.pipelineParallelSize);
    const startReplica = deps.startReplica ?? ((o: EngineOptions, label: string) => WorkerEngineClient.start(o, label));
    const settled = await Promise.allSettled(Array.from({ length: size }, (_, i) =>
      startReplica({ ...options, backend, deviceOrdinal: options.deviceOrdinal + i * worldSize(options) }, replicaLabel(i))));
    const failedAt = settled.findIndex((s) => s.status === 'rejected');
    if (failedAt >= 0) {
      await Promise.all(settled.map((s) => (s.status === 'fulfilled' ? s.value.shutdown() : undefined)));
      const reason = (settled[failedAt] as PromiseRejectedResult).reason as Error;
      throw new Error(`${replicaLabel(failedAt)} failed to load: ${reason.message ?? String(reason)}`);
    }
    return new DataParallelClient(settled.map((s) => (s as PromiseFulfilledResult<Replica>).value), options);
  }

  /** Set once a replica failed (the API then answers 503). */
  get error(): string | null {
    return this.failure;
  }

  /** Requests each replica has in flight, as the router counts them. */
  get replicaLoads(): readonly Readonly<ReplicaLoad>[] {
    return this.loads;
  }

  /** The replica a request in flight runs on, or null. */
  ownerOf(requestId: string): number | null {
    return this.owners.get(requestId)?.replica ?? null;
  }

  generate(req: EngineRequest): AsyncIterable<EngineOutput> {
    if (this.owners.has(req.requestId)) throw new Error(`request id "${req.requestId}" is already running`);
    if (this.failure !== null) {
      const s = new OutputStream();
      s.push({ requestId: req.requestId, newTokenIds: [], finished: true, finishReason: 'error', error: this.failure });
      return s;
    }
    const i = this.route(req);
    const numTokens = req.promptTokenIds.length + (req.pooling ? 0 : req.sampling.maxTokens);
    this.owners.set(req.requestId, { replica: i, numTokens });
    this.loads[i]!.numRequests++;
    this.loads[i]!.numTokens += numTokens;
    return this.replicas[i]!.generate(req);
  }

  /** The replica for a new request (data-parallel-routing.ts); remembers that it now holds the prompt's prefixes. */
  private route(req: EngineRequest): number {
    if (!this.options.enablePrefixCaching) return pickReplica(this.loads, null);
    const hashes = prefixBlockHashes(req.promptTokenIds, this.info.blockSize, req.cacheSalt);
    const i = pickReplica(this.loads, this.affinity.lookup(hashes)?.replica ?? null);
    this.affinity.record(hashes, i);
    return i;
  }

  abort(requestId: string): void {
    const owned = this.owners.get(requestId);
    if (owned === undefined) return;
    // the replica frees the pages as soon as the message lands; the load is the router's to give back at once
    this.settle(requestId);
    this.replicas[owned.replica]!.abort(requestId);
  }

  /** The request left its replica (finished, aborted, or ended by a failure): its load goes. */
  private settle(requestId: string): void {
    const owned = this.owners.get(requestId);
    if (owned === undefined) return;
    this.owners.delete(requestId);
    const load = this.loads[owned.replica]!;
    load.numRequests--;
    load.numTokens -= owned.numTokens;
  }

  stats(): EngineStats {
    return sumStats(this.replicaStats());
  }

  /** Each replica's stats, in order (the per-engine metrics). */
  replicaStats(): EngineStats[] {
    return this.replicas.map((r) => r.stats());
  }

  /** The devices' figure summed (N devices copy N times the bytes a second); null when one has none (the CPU). */
  async probe(what: ProbeKind): Promise<number | null> {
    const values = await Promise.all(this.replicas.map((r) => r.probe(what)));
    let sum = 0;
    for (const v of values) {
      if (v === null) return null;
      sum += v;
    }
    return sum;
  }

  /**
   * A replica failed: the whole engine stops, as one engine would. Every other replica's requests end with the same
   * message (they would otherwise run on behind a server about to exit), and every replica's worker is stopped.
   */
  private replicaFailed(i: number, message: string): void {
    if (this.failure !== null) return;  // a peer's fail() below reports back here
    this.failure = message.includes(replicaLabel(i)) ? message : `${replicaLabel(i)} failed: ${message}`;
    this.replicas.forEach((r, j) => {
      if (j !== i) r.fail(this.failure!);
    });
    this.owners.clear();
    for (const load of this.loads) {
      load.numRequests = 0;
      load.numTokens = 0;
    }
    void this.shutdown();
    this.onFailure?.(this.failure);
  }

  /** Stops every replica (each one's requests still in flight end with an error). */
  shutdown(): Promise<void> {
    return this.shutdownWithTrace().then(() => undefined);
  }

  /** Stops every replica; resolves with their admission trace summaries (--scheduler-trace), each under its name. */
  shutdownWithTrace(): Promise<string | null> {
    this.stopping ??= Promise.all(this.replicas.map((r) => r.shutdownWithTrace())).then((traces) => {
      this.owners.clear();
      this.affinity.clear();
      const named = traces.flatMap((t, i) => (t === null ? [] : [`${replicaLabel(i)}:\n${t}`]));
      return named.length > 0 ? named.join('\n') : null;
    });
    return this.stopping;
  }
}

/** One EngineInfo for the replicas: the smallest pools and the slowest load; the device named with the count. */
function mergedInfo(infos: readonly EngineInfo[]): EngineInfo {
  const first = infos[0]!;
  const devices = [...new Set(infos.map((i) => i.device))];
  return {
    ...first,
    device: devices.length === 1 ? `${infos.length} x ${devices[0]}` : devices.join(', '),
    numBlocks: Math.min(...infos.map((i) => i.numBlocks)),
    numStateSlots: Math.min(...infos.map((i) => i.numStateSlots)),
    numCachedStateSlots: Math.min(...infos.map((i) => i.numCachedStateSlots)),
    loadMs: Math.max(...infos.map((i) => i.loadMs)),
  };
}
