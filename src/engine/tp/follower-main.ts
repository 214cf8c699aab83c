// A tensor-parallel rank other than 0, in a worker thread of the engine's or a child process (rank-port.ts): it
// loads its shard on its own device, then runs what rank 0 hands it (protocol.ts) in the order given: the start-up
// profile step, the allocation rank 0 sized, the decode graphs' capture, and every step's DeviceStep, on its shard,
// so its collectives meet rank 0's. A failure is reported to rank 0 (which ends the engine with it) after the
// communicator is aborted, so no rank waits on this one.

import { loadModel } from '../../loader/model-dir.js';
import { Model } from '../../model/model.js';
import { shardedConfig, shardedSource } from '../../parallel/sharded-source.js';
import { joinRanks, type RankComm } from '../../parallel/tp-rank.js';
import { createBackend } from '../backend-factory.js';
import type { Backend } from '../../backend/backend.js';
import { runDeviceStep } from '../runner/device-steps.js';
import { captureDecodeGraphs, profileRun } from '../runner/model-runner.js';
import type { ToFollower } from './protocol.js';
import { followerChannel } from './rank-port.js';

const channel = await followerChannel();
const { init, post } = channel;
let comm: RankComm | null = null;
let backend: Backend | null = null;

function fail(err: unknown): void {
  comm?.abort();
  comm = null;
  post({ type: 'failed', message: `tensor-parallel rank ${init.rank}: ${err instanceof Error ? err.message : String(err)}` });
}

async function start(): Promise<void> {
  const { rank, size, options, device, peer } = init;
  const dir = await loadModel(options.model, options);
  backend = (await createBackend({ ...options, deviceOrdinal: device })).backend;
  post({ type: 'ready' });
  comm = await joinRanks(init.comm, rank, size, backend, { peer });
  const model = Model.load(shardedConfig(dir.config, rank, size), shardedSource(dir.weights, dir.config, rank, size),
    backend, { quantization: options.quantization, tensorParallel: comm.tp });
  post({ type: 'loaded' });
  let eager = true;
  channel.onMessage((m: ToFollower) => {
    try {
      switch (m.type) {
        case 'profile':
          profileRun(model, m.options, m.maxModelLen);
          return;
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
          comm = null;
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
