// A rank other than 0, in a worker thread of the engine's or a child process (rank-port.ts): it loads its part of
// the model (its tensor-parallel shard of its pipeline stage's layers: parallel/pipeline.ts rankView) on its own
// device, then runs what rank 0 hands it (protocol.ts) in the order given: the start-up profile step, the allocation
// rank 0 sized, the decode graphs' capture, and every step's DeviceStep, so its collectives meet its stage's ranks'
// and its sends and receives its neighbour stages'. A stage before the last computes no logits: its steps end with
// the send to the next stage. A failure is reported to rank 0 (which ends the engine with it) after every
// communicator is aborted with it, so no rank waits on this one, and a rank blocked on this one names it.

import { loadModel } from '../../loader/model-dir.js';
import { Model } from '../../model/model.js';
import { rankView } from '../../parallel/pipeline.js';
import { joinStage, type StageComm } from '../../parallel/pp-rank.js';
import { joinRanks, type RankComm } from '../../parallel/tp-rank.js';
import { createBackend } from '../backend-factory.js';
import { shardOptions } from '../options.js';
import type { Backend } from '../../backend/backend.js';
import { runDeviceStep } from '../runner/device-steps.js';
import { captureDecodeGraphs, profileRun } from '../runner/model-runner.js';
import { isMainThread } from 'node:worker_threads';
import { watchRanks } from './rank-watchdog.js';
import { rankLabel, type ToFollower } from './protocol.js';
import { followerChannel } from './rank-port.js';

const channel = await followerChannel();
const { init, post } = channel;
const label = rankLabel(init.rank, init.tp, init.pp);
// a child process: it ends if its parent dies while it waits in a collective (rank-watchdog.ts)
if (isMainThread && process.send) watchRanks([{ pid: process.ppid, label: 'its parent (rank 0 or the node agent)' }], { graceMs: 1000 });
let comm: RankComm | null = null;
let stage: StageComm | null = null;
let backend: Backend | null = null;

function fail(err: unknown): void {
  const message = `${label}: ${err instanceof Error ? err.message : String(err)}`;
  comm?.abort(message);
  stage?.abort(message);
  comm = null;
  stage = null;
  post({ type: 'failed', message });
}

async function start(): Promise<void> {
  const { options, device, peer, tp, pp } = init;
  const dir = await loadModel(options.model, options);
  backend = (await createBackend({ ...options, deviceOrdinal: device })).backend;
  post({ type: 'ready' });
  // every rank joins its stage's group first, then its pipeline group (NCCL: each init waits for its whole group)
  if (tp.comm) comm = await joinRanks(tp.comm, tp.rank, tp.size, backend, { peer });
  if (pp.comm) stage = await joinStage(pp.comm, pp.stage, pp.size, backend);
  const view = rankView(dir.config, dir.weights, { tpRank: tp.rank, stage: pp.stage }, tp.size, pp.size, pp.layers,
    shardOptions(options));
  const model = Model.load(view.config, view.weights, backend,
    { quantization: options.quantization, tensorParallel: comm?.tp ?? null, pipeline: stage?.link ?? null });
  post({ type: 'loaded', report: { stateSpecs: model.layerStateSpecs(), weightBytesPerStep: model.weightBytesPerStep(),
    kvBytesPerToken: model.kvBytesPerToken() } });
  let eager = true;
  channel.onMessage((m: ToFollower) => {
    try {
      switch (m.type) {
        case 'profile': {
          profileRun(model, m.options, m.maxModelLen);
          const available = backend!.memory().availableKvBytes;
          post({ type: 'profiled', kvBudgetBytes: options.kvCacheBytes === null ? available : Math.min(available, options.kvCacheBytes) });
          return;
        }
        case 'sized': {
          const layout = model.recurrentStateLayout(m.numStateSlots);
          if (layout !== null) backend!.allocateRecurrentState(layout);
          backend!.allocateKvCache(model.kvCacheSpec(m.numBlocks, m.options.blockSize));
          eager = m.options.enforceEager;
          captureDecodeGraphs(model, m.options);
          return;
        }
        case 'step': {
          const r = runDeviceStep(model, eager ? undefined : backend!.graphs, m.step);
          if (r.op === 'tokens') r.wait();
          return;
        }
        case 'shutdown':
          comm?.destroy();
          stage?.destroy();
          comm = null;
          stage = null;
          backend?.dispose();
          post({ type: 'closed' });
          channel.close();
      }
    } catch (err) {
      fail(err);
    }
  });
}

start().catch(fail);
