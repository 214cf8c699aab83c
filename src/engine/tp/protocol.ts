// Messages between rank 0 (the engine core's thread, leader.ts) and the other ranks of tensor and pipeline
// parallelism (a worker thread or a child process each, follower-main.ts). Structured-clonable plain data: a step's
// device work goes as its DeviceStep, the flat batch's typed arrays copied once per rank, never the requests it came
// from.

import type { LayerStateSpec } from '../../model/layers/types.js';
import type { StageLayers } from '../../parallel/pipeline.js';
import type { CommInit } from '../../parallel/tp-rank.js';
import type { EngineOptions, ResolvedEngineOptions } from '../options.js';
import type { DeviceStep } from '../runner/device-steps.js';

export interface FollowerInit {
  /** Its rank of tensorParallelSize x pipelineParallelSize (rank 0 is the engine's: parallel/pipeline.ts rankPlace). */
  rank: number;
  /** The CUDA device this rank runs on, on its machine. */
  device: number;
  /** Whether small all-reduces take the one-shot peer kernel: rank 0 decides for every rank (leader.ts peerOption). */
  peer: boolean;
  options: EngineOptions;
  /** Its tensor-parallel rank of `size`, and the communicator of its stage's ranks (null: size 1). */
  tp: { rank: number; size: number; comm: CommInit | null };
  /** Its pipeline stage of `size`, the layers it holds, and the communicator of its pipeline group (null: size 1). */
  pp: { stage: number; size: number; layers: StageLayers | null; comm: CommInit | null };
}

/** How errors name a rank: by its tensor-parallel rank alone without pipeline stages, else by its stage too. */
export function rankLabel(rank: number, tp: { rank: number; size: number }, pp: { stage: number; size: number }): string {
  if (pp.size === 1) return `tensor-parallel rank ${rank}`;
  return `pipeline stage ${pp.stage}${tp.size > 1 ? `, tensor-parallel rank ${tp.rank}` : ''} (rank ${rank})`;
}

export type ToFollower =
  /** Run the start-up profile step (its all-reduces and sends meet rank 0's), then report what it leaves for KV. */
  | { type: 'profile'; options: ResolvedEngineOptions; maxModelLen: number }
  /** Allocate what rank 0 sized (the same pages and state slots on every rank), then capture the decode graphs. */
  | { type: 'sized'; numBlocks: number; numStateSlots: number; options: ResolvedEngineOptions }
  | { type: 'step'; step: DeviceStep }
  | { type: 'shutdown' };

/** What a rank's model is, for rank 0 to size the KV cache and count bytes over every stage. */
export interface StageReport {
  /** Its layers' state (Model.layerStateSpecs), in layer order. */
  stateSpecs: (LayerStateSpec | null)[];
  weightBytesPerStep: number;
  kvBytesPerToken: number;
}

export type FromFollower =
  /** The backend is up: the rank is about to join the communicators. */
  | { type: 'ready' }
  /** Its part of the model is loaded. */
  | { type: 'loaded'; report: StageReport }
  /** It ran the profile step: the bytes its backend may give to the KV cache (and state slots) now. */
  | { type: 'profiled'; kvBudgetBytes: number }
  | { type: 'failed'; message: string }
  | { type: 'closed' };
