// A request as the scheduler tracks it: its tokens, how many of them have KV
// in the cache, and its place in the lifecycle.
//
//   WAITING ──admit──► RUNNING ──finish/abort──► FINISHED_*
//      ▲                  │
//      └── PREEMPTED ◄────┘  (pages freed, numComputedTokens reset to 0)

import type { BlockHash } from '../kv/block-pool.js';
import type { KVRequest } from '../kv/kv-cache-manager.js';

export type FinishedStatus = 'FINISHED_STOPPED' | 'FINISHED_LENGTH' | 'FINISHED_ABORTED' | 'FINISHED_ERROR';
export type RequestStatus = 'WAITING' | 'RUNNING' | 'PREEMPTED' | FinishedStatus;

export interface RequestInit<S = unknown> {
  requestId: string;
  promptTokenIds: readonly number[];
  maxTokens: number;
  /** Lower runs first under the priority policy. */
  priority?: number;
  /** ms since epoch; ties in priority go to the earlier arrival. */
  arrivalTime?: number;
  cacheSalt?: string | null;
  sampling?: S;
}

export class Request<S = unknown> implements KVRequest {
  readonly requestId: string;
  readonly promptTokenIds: readonly number[];
  readonly outputTokenIds: number[] = [];
  readonly allTokenIds: number[];
  readonly maxTokens: number;
  readonly priority: number;
  readonly arrivalTime: number;
  readonly cacheSalt: string | null;
  readonly sampling: S | undefined;
  status: RequestStatus = 'WAITING';
  numComputedTokens = 0;
  /** Prompt tokens served from the prefix cache at first admission; -1 before it. */
  numCachedTokens = -1;
  numPreemptions = 0;
  blockHashes: BlockHash[] = [];

  constructor(init: RequestInit<S>) {
    if (init.promptTokenIds.length === 0) throw new Error(`request ${init.requestId}: empty prompt`);
    this.requestId = init.requestId;
    this.promptTokenIds = [...init.promptTokenIds];
    this.allTokenIds = [...init.promptTokenIds];
    this.maxTokens = init.maxTokens;
    this.priority = init.priority ?? 0;
    this.arrivalTime = init.arrivalTime ?? Date.now();
    this.cacheSalt = init.cacheSalt ?? null;
    this.sampling = init.sampling;
  }

  get numTokens(): number {
    return this.allTokenIds.length;
  }

  get numPromptTokens(): number {
    return this.promptTokenIds.length;
  }

  get numOutputTokens(): number {
    return this.outputTokenIds.length;
  }

  /** Feeding exactly its last sampled token (as opposed to a prompt chunk or a recompute). */
  get isDecoding(): boolean {
    return this.outputTokenIds.length > 0 && this.numComputedTokens === this.allTokenIds.length - 1;
  }

  get isFinished(): boolean {
    return this.status.startsWith('FINISHED');
  }

  appendOutputTokens(tokenIds: readonly number[]): void {
    for (const t of tokenIds) {
      this.outputTokenIds.push(t);
      this.allTokenIds.push(t);
    }
  }
}
