// One rank of tp-model.test.ts: a test model's shard (shardedConfig, shardedSource over its random weights) on the
// CPU backend, its all-reduces through the shared-memory communicator, one forward over two sequences; posts the
// logits. `expertParallel`: a mixture of experts' experts whole a rank, so placed.

import { parentPort, workerData } from 'node:worker_threads';
import { CpuBackend } from '../../src/backend/cpu/cpu-backend.js';
import { parseModelConfig } from '../../src/loader/config.js';
import { Model } from '../../src/model/model.js';
import { randomWeightSource } from '../../src/model/random-weights.js';
import type { CpuCommGroup } from '../../src/parallel/cpu-comm.js';
import { shardedConfig, shardedSource } from '../../src/parallel/sharded-source.js';
import type { ExpertPlacement } from '../../src/parallel/sharding.js';
import { joinRanks } from '../../src/parallel/tp-rank.js';
import { testModelShapes } from '../../src/tools/test-model/shapes.js';
import { prepare, twoPrompts } from './tp-model-batch.js';

const { shape, rank, size, group, expertParallel } = workerData as { shape: string; rank: number; size: number; group: CpuCommGroup;
  expertParallel: ExpertPlacement | null };
const full = { ...parseModelConfig(testModelShapes()[shape], shape), dtype: 'f32' as const };
const backend = new CpuBackend({ kvCacheBytes: 1 << 22, numThreads: 1 });
const comm = await joinRanks({ kind: 'cpu', group }, rank, size, backend);
const config = shardedConfig(full, rank, size, { expertParallel });
const model = Model.load(config, shardedSource(randomWeightSource(full, { seed: 5 }), full, rank, size, { expertParallel }), backend,
  { tensorParallel: comm.tp });
prepare(model, backend);
const logits = model.forward(twoPrompts(full.hybrid !== null));
comm.destroy();
parentPort!.postMessage({ logits, numHeads: config.numHeads, numKvHeads: config.numKvHeads, kvBytesPerToken: model.kvBytesPerToken(),
  lmHeadRows: model.parts.lmHead!.shape[0] });
