// Rank 0 of tensor and pipeline parallelism (vLLM's -tp N and -pp M): the engine core's thread loads its part of the
// model on its device and starts the other ranks, one a device (rank r on deviceOrdinal + r; follower-main.ts). The
// scheduler, KV bookkeeping and sampling run once, here; each step's device work goes to every rank as its
// DeviceStep (ModelRunner's mirror) before rank 0 runs it. Within a stage the ranks' all-reduces meet inside the
// forward (NCCL on CUDA, shared memory between threads on the CPU backend); between stages the residual stream goes
// from each stage to the next by point-to-point sends (parallel/pp-rank.ts). The other ranks are child processes on
// CUDA (QUIRE_TP_RANKS=thread: worker threads) and threads on the CPU backend (rank-port.ts says why).
//
// Rank 0 runs the LAST pipeline stage (parallel/pipeline.ts rankPlace): the logits, the sampled tokens, the prompt
// logprobs and the pooled hidden states are made where the engine needs them, so no result travels back between
// stages, and a step's sends all flow one way. The stages before it end each step with their send.
//
// The KV cache is sized over every stage: each stage holds its own layers' pages (and a hybrid model's recurrent
// states of its own layers), in the memory its device has left after its profile run, and the engine takes the
// fewest pages (and state slots) any stage holds (stage-kv.ts). A stage's few layers make its pages small, so -pp
// N holds about N times the tokens of one device.
//
// A rank that fails ends the engine: at start-up its error is the engine's; later, the next step's mirror throws
// it. Its communicators are aborted first, naming it, so no rank waits on the one that failed and a rank blocked on it
// (rank 0 in a receive) ends with its message. A child-process rank that dies while rank 0's thread is blocked on it
// (a collective in a step: no event arrives) ends every rank and the process with a message (rank-watchdog.ts).

import type { Backend, TensorParallelRank } from '../../backend/backend.js';
import type { ModelDir } from '../../loader/model-dir.js';
import { Model } from '../../model/model.js';
import { createNcclUniqueId } from '../../parallel/comm.js';
import { createCpuCommGroup } from '../../parallel/cpu-comm.js';
import { layerPartition, pipelineRefusal, rankAt, rankPlace, rankView, stageLayers, type StageLayers } from '../../parallel/pipeline.js';
import { joinStage, type StageComm } from '../../parallel/pp-rank.js';
import { tensorParallelSourceRefusal } from '../../parallel/sharded-source.js';
import { joinRanks, type CommInit, type RankComm } from '../../parallel/tp-rank.js';
import { tensorParallelRefusal } from '../../parallel/validate.js';
import { shardOptions, worldSize, type EngineOptions, type ResolvedEngineOptions } from '../options.js';
import type { DeviceStep } from '../runner/device-steps.js';
import { rankLabel, type FollowerInit, type FromFollower, type StageReport, type ToFollower } from './protocol.js';
import { startRank, type RankPort } from './rank-port.js';
import { readKnob } from '../../knobs/knobs.js';
import { parseSpeculativeConfig } from '../spec/config.js';
import { eagle3HeadOf } from '../spec/eagle3-load.js';
import type { ModelConfig } from '../../loader/types.js';
import { nodeIdentity, nodesRefusal } from './node-link.js';
import { acceptNodes, remoteRanks } from './node-leader.js';
import { watchRanks, type RankWatchdog } from './rank-watchdog.js';

/** How long a rank may take to load its part before the engine gives up on it. */
const LOAD_TIMEOUT_MS = 15 * 60_000;

export class RankLeader {
  private failure: string | null = null;
  /** The ranks that have reported each message type (a report may come before anyone waits for it). */
  private readonly reported = new Map<FromFollower['type'], Set<number>>();
  private readonly waiters = new Set<() => void>();
  private comm: RankComm | null = null;
  private stage: StageComm | null = null;
  /** What each other rank loaded, and what its device leaves for the KV cache after the profile step. */
  private readonly reports = new Map<number, StageReport>();
  private readonly budgets = new Map<number, number>();
  /** This machine's child-process ranks watched while rank 0's loop may be blocked (rank-watchdog.ts). */
  private watchdog: RankWatchdog | null = null;

  private constructor(readonly tpSize: number, readonly ppSize: number, private readonly layers: StageLayers[] | null,
    private readonly workers: RankPort[], private readonly label: (rank: number) => string) {
    workers.forEach((w, i) => {
      const rank = i + 1;
      w.listen((m) => this.receive(m, rank), (why) => this.receive({ type: 'failed', message: `${label(rank)}: ${why}` }, rank));
    });
  }

  get size(): number {
    return this.tpSize * this.ppSize;
  }

  /** Rank 0's tensor-parallel collective (null: tensorParallelSize 1). */
  get rank0(): TensorParallelRank | null {
    return this.comm?.tp ?? null;
  }

  /**
   * Starts ranks 1..size-1 and joins them as rank 0 (`backend`: rank 0's, already on its device): this machine's as
   * child processes (or threads), the other nodes' through their agents once each has joined (node-leader.ts).
   */
  static async start(options: EngineOptions, backend: Backend, config: ModelConfig): Promise<RankLeader> {
    if (backend.name === 'cuda') process.env.NCCL_NVLS_ENABLE ??= '0';  // NVLink multicast stays off (issue 42)
    const tp = options.tensorParallelSize;
    const pp = options.pipelineParallelSize;
    const size = tp * pp;
    // every group's init made here: a stage's ranks (tensor parallel), and each tensor-parallel rank's stages
    const group = async (n: number, p2p: boolean): Promise<CommInit> => backend.name === 'cpu'
      ? { kind: 'cpu', group: createCpuCommGroup(n, { timeoutMs: LOAD_TIMEOUT_MS, p2p }) } : { kind: 'nccl', id: await createNcclUniqueId() };
    const tpComms: (CommInit | null)[] = [];
    for (let s = 0; s < pp; s++) tpComms.push(tp > 1 ? await group(tp, false) : null);
    const ppComms: (CommInit | null)[] = [];
    for (let r = 0; r < tp; r++) ppComms.push(pp > 1 ? await group(pp, true) : null);
    const layers = pp > 1 ? stageLayers(layerPartition(config.numLayers, pp)) : null;
    const mode = backend.name === 'cpu' ? 'thread' : readKnob('QUIRE_TP_RANKS');
    const perNode = size / options.nnodes;
    const { peer } = peerOption(options);
    const init = (rank: number, device: number): FollowerInit => {
      const { tpRank, stage } = rankPlace(rank, tp, pp);
      return { rank, device, peer, options, tp: { rank: tpRank, size: tp, comm: tpComms[stage]! },
        pp: { stage, size: pp, layers: layers?.[stage] ?? null, comm: ppComms[tpRank]! } };
    };
    const label = (rank: number): string => {
      const f = init(rank, 0);
      return rankLabel(rank, f.tp, f.pp);
    };
    const workers = Array.from({ length: perNode - 1 }, (_, i) => startRank(init(i + 1, options.deviceOrdinal + i + 1), mode));
    const children = workers.flatMap((w, i) => (w.pid !== undefined ? [{ pid: w.pid, label: label(i + 1) }] : []));
    const watchdog = children.length > 0 ? watchRanks(children) : null;
    if (options.nnodes > 1) {
      try {
        const { nodes } = await acceptNodes(options, nodeIdentity(options, config));
        workers.push(...remoteRanks(nodes, options, init));
      } catch (err) {
        watchdog?.stop();
        await Promise.all(workers.map((w) => w.terminate()));
        throw err;
      }
    }
    const leader = new RankLeader(tp, pp, layers, workers, label);
    leader.watchdog = watchdog;
    try {
      // every rank's backend up before rank 0 blocks in the communicators' inits (NCCL waits for all of them)
      await leader.waitAll('ready', LOAD_TIMEOUT_MS);
      const self = init(0, options.deviceOrdinal);
      if (self.tp.comm) leader.comm = await joinRanks(self.tp.comm, 0, tp, backend, { peer });
      if (self.pp.comm) leader.stage = await joinStage(self.pp.comm, self.pp.stage, pp, backend);
    } catch (err) {
      watchdog?.stop();
      await Promise.all(workers.map((w) => w.terminate()));
      throw err;
    }
    return leader;
  }

  private receive(m: FromFollower, rank: number): void {
    if (m.type === 'failed' && this.failure === null) {
      this.watchdog?.handled();
      this.failure = m.message;
      this.comm?.abort(m.message);
      this.stage?.abort(m.message);
    }
    if (m.type === 'loaded') this.reports.set(rank, m.report);
    if (m.type === 'profiled') this.budgets.set(rank, m.kvBudgetBytes);
    if (!this.reported.has(m.type)) this.reported.set(m.type, new Set());
    this.reported.get(m.type)!.add(rank);
    for (const w of [...this.waiters]) w();
  }

  /** Resolves once every other rank has reported `type`; rejects with the first failure, or after timeoutMs. */
  private waitAll(type: FromFollower['type'], timeoutMs: number): Promise<void> {
    return new Promise((resolve, reject) => {
      const seen = (): Set<number> => this.reported.get(type) ?? new Set();
      const timer = setTimeout(() => finish(new Error(`${this.ppSize > 1 ? 'pipeline parallelism' : 'tensor parallelism'}: ranks ` +
        `${this.missing(seen())} did not report '${type}' within ${timeoutMs / 1000} s`)), timeoutMs);
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

  /** Rank 0's part (its shard of the last stage); resolves once every rank has loaded its own. */
  async load(dir: ModelDir, backend: Backend, options: EngineOptions): Promise<Model> {
    const place = rankPlace(0, this.tpSize, this.ppSize);
    const view = rankView(dir.config, dir.weights, place, this.tpSize, this.ppSize, this.layers?.[place.stage] ?? null,
      shardOptions(options));
    const model = Model.load(view.config, view.weights, backend,
      { quantization: options.quantization, tensorParallel: this.rank0, pipeline: this.stage?.link ?? null });
    await this.waitAll('loaded', LOAD_TIMEOUT_MS);
    return model;
  }

  /** The other ranks run the start-up profile step with rank 0's (call just before rank 0's profileRun). */
  profile(options: ResolvedEngineOptions, maxModelLen: number): void {
    this.send({ type: 'profile', options, maxModelLen });
  }

  /**
   * Every stage's layers' state specs and its KV budget (the least of its ranks'), in stage order, with rank 0's
   * (`model`, `budgetBytes`) for the last: resolves once every rank has run the profile step.
   */
  async stages(model: Model, budgetBytes: number): Promise<{ report: StageReport; budgetBytes: number }[]> {
    await this.waitAll('profiled', LOAD_TIMEOUT_MS);
    return Array.from({ length: this.ppSize }, (_, s) => {
      const ranks = Array.from({ length: this.tpSize }, (_, t) => rankAt(s, t, this.tpSize, this.ppSize));
      const report = ranks[0] === 0 ? { stateSpecs: model.layerStateSpecs(), weightBytesPerStep: model.weightBytesPerStep(),
        kvBytesPerToken: model.kvBytesPerToken() } : this.reports.get(ranks[0]!)!;
      return { report, budgetBytes: Math.min(...ranks.map((r) => (r === 0 ? budgetBytes : this.budgets.get(r)!))) };
    });
  }

  /** The other ranks allocate what rank 0 sized and capture their decode graphs (before rank 0 captures its own). */
  sized(numBlocks: number, numStateSlots: number, options: ResolvedEngineOptions): void {
    this.send({ type: 'sized', numBlocks, numStateSlots, options });
  }

  /** ModelRunner's mirror: the step's device work to every other rank. */
  readonly mirror = (step: DeviceStep): void => this.send({ type: 'step', step });

  /** Ends every rank (a collective: each destroys its communicators). */
  async shutdown(): Promise<void> {
    this.watchdog?.stop();
    if (this.failure === null) {
      const closed = this.waitAll('closed', 30_000).catch(() => {});
      this.send({ type: 'shutdown' });
      this.comm?.destroy();
      this.stage?.destroy();
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

/** Why `dir`'s model cannot run over these ranks, naming the flag, or null. */
function parallelStartRefusal(dir: ModelDir, options: EngineOptions): string | null {
  const tp = options.tensorParallelSize;
  const pp = options.pipelineParallelSize;
  const tpWhy = tp > 1 ? tensorParallelRefusal(dir.config, tp, { expertParallel: options.enableExpertParallel })?.message
    ?? tensorParallelSourceRefusal(dir.config) : null;
  if (tpWhy) return `--tensor-parallel-size ${tp}: ${tpWhy}`;
  const ppWhy = pipelineRefusal(dir.config, pp);
  if (ppWhy) return ppWhy.startsWith('--pipeline-parallel-size') ? ppWhy : `--pipeline-parallel-size ${pp}: ${ppWhy}`;
  return null;
}

/** Why this machine's `numDevices` CUDA devices cannot hold its ranks (a device a rank, from deviceOrdinal), or null. */
export function devicesRefusal(options: EngineOptions, numDevices: number): string | null {
  const size = worldSize(options);
  const perNode = size / options.nnodes;
  const needed = options.deviceOrdinal + perNode;
  if (numDevices >= needed) return null;
  const flags = options.pipelineParallelSize > 1
    ? `--tensor-parallel-size ${options.tensorParallelSize} x --pipeline-parallel-size ${options.pipelineParallelSize}`
    : `--tensor-parallel-size ${size}`;
  const what = options.nnodes > 1 ? `${perNode} CUDA devices a node` : `${size} CUDA devices`;
  return `${flags} needs ${what} (devices ${options.deviceOrdinal} to ${needed - 1}), but ${numDevices} ` +
    `${numDevices === 1 ? 'is' : 'are'} visible (CUDA_VISIBLE_DEVICES decides which)`;
}

/**
 * The engine's model: whole (one rank), or rank 0's part with the other ranks started and loaded. Refusals (a size
 * the model does not split by, a part not split yet, more stages than layers, fewer CUDA devices than ranks) come
 * before any rank starts.
 */
export async function loadEngineModel(dir: ModelDir, backend: Backend, options: EngineOptions):
  Promise<{ model: Model; tp: RankLeader | null }> {
  const size = worldSize(options);
  // the mtp method's head loads with the model (one device: spec/mtp-load.ts refuses it under tensor or pipeline
  // parallelism)
  const spec = options.speculativeConfig != null ? parseSpeculativeConfig(options.speculativeConfig) : null;
  const mtp = spec?.method === 'mtp';
  // so does an EAGLE-3 head (spec/eagle3-load.ts refuses it likewise)
  const eagle3 = eagle3HeadOf(spec);
  if (size <= 1) {
    return { model: Model.load(dir.config, dir.weights, backend, { quantization: options.quantization, mtp, eagle3 }), tp: null };
  }
  const refusal = parallelStartRefusal(dir, options);
  if (refusal) throw new Error(refusal);
  const nodes = nodesRefusal({ ...options, backend: backend.name });
  if (nodes) throw new Error(nodes);
  if (backend.name === 'cuda') {
    const { cudaAvailable } = await import('../../backend/cuda/probe.js');
    const probe = cudaAvailable();
    const few = probe.ok ? devicesRefusal(options, probe.numDevices) : null;
    if (few) throw new Error(few);
  }
  const tp = await RankLeader.start(options, backend, dir.config);
  try {
    return { model: await tp.load(dir, backend, options), tp };
  } catch (err) {
    await tp.shutdown();
    throw err;
  }
}
