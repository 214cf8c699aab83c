// Tensor parallelism's rank 0 (vLLM's -tp N): the engine core's thread loads rank 0's shard on its device and starts
// the other ranks, one each on devices deviceOrdinal + 1 .. + N - 1 (follower-main.ts). The scheduler,
// KV bookkeeping and sampling run once, here; each step's device work goes to every rank as its DeviceStep
// (ModelRunner's mirror) before rank 0 runs it, and the ranks' all-reduces meet inside the forward (NCCL on CUDA,
// shared memory between threads on the CPU backend). The other ranks are child processes on CUDA
// (QUIRE_TP_RANKS=thread: worker threads) and threads on the CPU backend (rank-port.ts says why).
//
// A rank that fails ends the engine: at start-up its error is the engine's; later, the next step's mirror throws
// it. Every rank's communicator is aborted first, so none waits on the one that failed.

import type { Backend, TensorParallelRank } from '../../backend/backend.js';
import type { ModelDir } from '../../loader/model-dir.js';
import { Model } from '../../model/model.js';
import { createNcclUniqueId } from '../../parallel/comm.js';
import { createCpuCommGroup } from '../../parallel/cpu-comm.js';
import { shardedConfig, shardedSource, tensorParallelSourceRefusal } from '../../parallel/sharded-source.js';
import { joinRanks, type CommInit, type RankComm } from '../../parallel/tp-rank.js';
import { tensorParallelRefusal } from '../../parallel/validate.js';
import type { EngineOptions, ResolvedEngineOptions } from '../options.js';
import type { DeviceStep } from '../runner/device-steps.js';
import type { FromFollower, ToFollower } from './protocol.js';
import { startRank, type RankPort } from './rank-port.js';
import { readKnob } from '../../knobs/knobs.js';
import { parseSpeculativeConfig } from '../spec/config.js';
import type { ModelConfig } from '../../loader/types.js';
import { nodeIdentity, nodesRefusal } from './node-link.js';
import { acceptNodes, remoteRanks } from './node-leader.js';

/** How long a rank may take to load its shard before the engine gives up on it. */
const LOAD_TIMEOUT_MS = 15 * 60_000;

export class TensorParallelLeader {
  private failure: string | null = null;
  /** The ranks that have reported each message type (a report may come before anyone waits for it). */
  private readonly reported = new Map<FromFollower['type'], Set<number>>();
  private readonly waiters = new Set<() => void>();
  private comm: RankComm | null = null;

  private constructor(readonly size: number, private readonly workers: RankPort[]) {
    workers.forEach((w, i) => {
      const rank = i + 1;
      w.listen((m) => this.receive(m, rank),
        (why) => this.receive({ type: 'failed', message: `tensor-parallel rank ${rank}: ${why}` }, rank));
    });
  }

  get rank0(): TensorParallelRank {
    return this.comm!.tp;
  }

  /**
   * Starts ranks 1..size-1 and joins them as rank 0 (`backend`: rank 0's, already on its device): this machine's as
   * child processes (or threads), the other nodes' through their agents once each has joined (node-leader.ts).
   */
  static async start(options: EngineOptions, size: number, backend: Backend, config: ModelConfig): Promise<TensorParallelLeader> {
    if (backend.name === 'cuda') process.env.NCCL_NVLS_ENABLE ??= '0';  // NVLink multicast stays off (issue 42)
    const comm: CommInit = backend.name === 'cpu' ? { kind: 'cpu', group: createCpuCommGroup(size, { timeoutMs: LOAD_TIMEOUT_MS }) }
      : { kind: 'nccl', id: await createNcclUniqueId() };
    const mode = backend.name === 'cpu' ? 'thread' : readKnob('QUIRE_TP_RANKS');
    const perNode = size / options.nnodes;
    const { peer } = peerOption(options);
    const workers = Array.from({ length: perNode - 1 }, (_, i) =>
      startRank({ rank: i + 1, size, device: options.deviceOrdinal + i + 1, peer, options, comm }, mode));
    if (options.nnodes > 1) {
      try {
        const { nodes } = await acceptNodes(options, nodeIdentity(options, config));
        workers.push(...remoteRanks(nodes, options, (rank, device) => ({ rank, size, device, peer, options, comm })));
      } catch (err) {
        await Promise.all(workers.map((w) => w.terminate()));
        throw err;
      }
    }
    const leader = new TensorParallelLeader(size, workers);
    try {
      // every rank's backend up before rank 0 blocks in the communicator's init (NCCL waits for all of them)
      await leader.waitAll('ready', LOAD_TIMEOUT_MS);
      leader.comm = await joinRanks(comm, 0, size, backend, { peer });
    } catch (err) {
      await Promise.all(workers.map((w) => w.terminate()));
      throw err;
    }
    return leader;
  }

  private receive(m: FromFollower, rank: number): void {
    if (m.type === 'failed' && this.failure === null) {
      this.failure = m.message;
      this.comm?.abort();
    }
    if (!this.reported.has(m.type)) this.reported.set(m.type, new Set());
    this.reported.get(m.type)!.add(rank);
    for (const w of [...this.waiters]) w();
  }

  /** Resolves once every other rank has reported `type`; rejects with the first failure, or after timeoutMs. */
  private waitAll(type: FromFollower['type'], timeoutMs: number): Promise<void> {
    return new Promise((resolve, reject) => {
      const seen = (): Set<number> => this.reported.get(type) ?? new Set();
      const timer = setTimeout(() => finish(new Error(`tensor parallelism: ranks ${this.missing(seen())} did not ` +
        `report '${type}' within ${timeoutMs / 1000} s`)), timeoutMs);
      const finish = (err: Error | null): void => {
        clearTimeout(timer);
        this.waiters.delete(check);
        if (err) reject(err); else resolve();
      };
      const check = (): void => {
        if (this.failure !== null) finish(new Error(this.failure));
        else if (seen().size === this.size - 1) finish(null);
      };
      this.waiters.add(check);
      check();
    });
  }

  private missing(seen: Set<number>): string {
    return Array.from({ length: this.size - 1 }, (_, i) => i + 1).filter((r) => !seen.has(r)).join(', ');
  }

  private send(m: ToFollower): void {
    if (this.failure !== null) throw new Error(this.failure);
    for (const w of this.workers) w.post(m);
  }

  /** Rank 0's shard; resolves once every rank has loaded its own. */
  async load(dir: ModelDir, backend: Backend, options: EngineOptions): Promise<Model> {
    const model = Model.load(shardedConfig(dir.config, 0, this.size), shardedSource(dir.weights, dir.config, 0, this.size),
      backend, { quantization: options.quantization, tensorParallel: this.rank0 });
    await this.waitAll('loaded', LOAD_TIMEOUT_MS);
    return model;
  }

  /** The other ranks run the start-up profile step with rank 0's (call just before rank 0's profileRun). */
  profile(options: ResolvedEngineOptions, maxModelLen: number): void {
    this.send({ type: 'profile', options, maxModelLen });
  }

  /** The other ranks allocate what rank 0 sized and capture their decode graphs (before rank 0 captures its own). */
  sized(numBlocks: number, numStateSlots: number, options: ResolvedEngineOptions): void {
    this.send({ type: 'sized', numBlocks, numStateSlots, options });
  }

  /** ModelRunner's mirror: the step's device work to every other rank. */
  readonly mirror = (step: DeviceStep): void => this.send({ type: 'step', step });

  /** Ends every rank (a collective: each destroys its communicator). */
  async shutdown(): Promise<void> {
    if (this.failure === null) {
      const closed = this.waitAll('closed', 30_000).catch(() => {});
      this.send({ type: 'shutdown' });
      this.comm?.destroy();
      await closed;
    }
    await Promise.all(this.workers.map((w) => w.terminate()));
  }
}

/**
 * Whether small all-reduces may take the one-shot peer kernel: not where asked not to, nor where NCCL is told
 * devices may not reach each other's memory (NCCL_P2P_DISABLE=1: the forced network transport that stands in for
 * ranks on other machines).
 */
export function peerOption(options: EngineOptions): { peer: boolean } {
  return { peer: !options.disableCustomAllReduce && process.env.NCCL_P2P_DISABLE !== '1' };
}

/** Why `dir`'s model cannot run over `size` tensor-parallel ranks, or null. */
function tensorParallelStartRefusal(dir: ModelDir, size: number): string | null {
  return tensorParallelRefusal(dir.config, size)?.message ?? tensorParallelSourceRefusal(dir.config);
}

/**
 * The engine's model: whole (tensorParallelSize 1), or rank 0's shard with the other ranks started and loaded.
 * Refusals (a size the model does not split by, a part not split yet, fewer CUDA devices than ranks) come before any
 * rank starts.
 */
export async function loadEngineModel(dir: ModelDir, backend: Backend, options: EngineOptions):
  Promise<{ model: Model; tp: TensorParallelLeader | null }> {
  const size = options.tensorParallelSize;
  // the mtp method's head loads with the model (one device: spec/mtp-load.ts refuses it under tensor parallelism)
  const mtp = options.speculativeConfig != null && parseSpeculativeConfig(options.speculativeConfig).method === 'mtp';
  if (size <= 1) return { model: Model.load(dir.config, dir.weights, backend, { quantization: options.quantization, mtp }), tp: null };
  const refusal = tensorParallelStartRefusal(dir, size);
  if (refusal) throw new Error(`--tensor-parallel-size ${size}: ${refusal}`);
  const nodes = nodesRefusal({ ...options, backend: backend.name });
  if (nodes) throw new Error(nodes);
  if (backend.name === 'cuda') {
    const { cudaAvailable } = await import('../../backend/cuda/probe.js');
    const probe = cudaAvailable();
    const perNode = size / options.nnodes;
    const needed = options.deviceOrdinal + perNode;
    if (probe.ok && probe.numDevices < needed) {
      const what = options.nnodes > 1 ? `${perNode} CUDA devices a node` : `${size} CUDA devices`;
      throw new Error(`--tensor-parallel-size ${size} needs ${what} (devices ${options.deviceOrdinal} to ` +
        `${needed - 1}), but ${probe.numDevices} ${probe.numDevices === 1 ? 'is' : 'are'} visible (CUDA_VISIBLE_DEVICES decides which)`);
    }
  }
  const tp = await TensorParallelLeader.start(options, size, backend, dir.config);
  try {
    return { model: await tp.load(dir, backend, options), tp };
  } catch (err) {
    await tp.shutdown();
    throw err;
  }
}
