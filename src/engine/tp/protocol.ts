// Messages between tensor parallelism's rank 0 (the engine core's thread, leader.ts) and the other ranks (a worker
// thread each, follower-main.ts). Structured-clonable plain data: a step's device work goes as its DeviceStep, the
// flat batch's typed arrays copied once per rank, never the requests it came from.

import type { CommInit } from '../../parallel/tp-rank.js';
import type { EngineOptions, ResolvedEngineOptions } from '../options.js';
import type { DeviceStep } from '../runner/device-steps.js';

export interface FollowerInit {
  rank: number;
  size: number;
  /** The CUDA device this rank runs on, on its machine. */
  device: number;
  /** Whether small all-reduces take the one-shot peer kernel: rank 0 decides for every rank (leader.ts peerOption). */
  peer: boolean;
  options: EngineOptions;
  comm: CommInit;
}

export type ToFollower =
  /** Run the start-up profile step (its all-reduces meet rank 0's). */
  | { type: 'profile'; options: ResolvedEngineOptions; maxModelLen: number }
  /** Allocate what rank 0 sized (the same pages on every rank), then capture the decode graphs. */
  | { type: 'sized'; numBlocks: number; numStateSlots: number; options: ResolvedEngineOptions }
  | { type: 'step'; step: DeviceStep }
  | { type: 'shutdown' };

export type FromFollower =
  /** The backend is up: the rank is about to join the communicator. */
  | { type: 'ready' }
  /** Its shard is loaded. */
  | { type: 'loaded' }
  | { type: 'failed'; message: string }
  | { type: 'closed' };
