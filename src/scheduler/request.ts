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
  /** The logits of every prompt position are wanted (prompt logprobs): no prefix-cache hit until they are made. */
  promptLogits?: boolean;
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
  /**
   * Output tokens scheduled but not yet sampled (async scheduling): the tail of allTokenIds holds them as
   * -(r + 1), r the logits row of the step that samples them, until updateFromOutput puts the token there.
   */
  numPlaceholders = 0;
  /**
   * Prompt positions 0 .. promptLogitsDone - 1 have had their logits computed (for prompt logprobs: position p
   * predicts prompt token p + 1, so positions 0 .. numPromptTokens - 2 are wanted); kept across preemption, so a
   * recompute makes none twice. Starts at numPromptTokens - 1 (nothing wanted) unless init.promptLogits.
   */
  promptLogitsDone: number;
  /**
   * Proposed next tokens (speculative decoding) the next step may feed after its last token, to be verified;
   * set by the engine's proposer before each schedule() of a decoding request, consumed (cleared) when scheduled.
   */
  specTokenIds: number[] = [];
  /**
   * A hybrid model's state slot to restore before the request's next step, or -1: a verify step rejected a proposal
   * after its DeltaNet layers had taken it into the state, so the state goes back to its backup from before that
   * step and the step's accepted tokens are computed again (Scheduler.updateFromOutput).
   */
  pendingStateRestore = -1;
  /**
   * Verify steps in a row that sent a hybrid model's request back to its backup (pendingStateRestore), its state not
   * moving on since; 0 once a step of its leaves the state where the step ended. Bounds the tokens computed again
   * (mayTakeProposals).
   */
  numRollbacksInARow = 0;
  /**
   * A hybrid model's prompt position (a page end) where the request's leading pages stopped matching cached ones
   * with no state saved there (ComputedBlocks.numMatchedTokens), or 0: its prompt chunk ends there, so the state is
   * saved at the point another prompt diverged from it.
   */
  stateSavePoint = 0;

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
    this.promptLogitsDone = init.promptLogits ? 0 : this.promptTokenIds.length - 1;
  }

  /** Prompt positions whose logits are still wanted. */
  get numPromptLogitsLeft(): number {
    return this.promptTokenIds.length - 1 - this.promptLogitsDone;
  }

  get numTokens(): number {
    return this.allTokenIds.length;
  }

  get numPromptTokens(): number {
    return this.promptTokenIds.length;
  }

  /** Output tokens, the scheduled ones not yet sampled included. */
  get numOutputTokens(): number {
    return this.outputTokenIds.length;
  }

  /** Output tokens sampled so far. */
  get numSampledOutputTokens(): number {
    return this.outputTokenIds.length - this.numPlaceholders;
  }

  /** Feeding exactly its last sampled token (as opposed to a prompt chunk or a recompute). */
  get isDecoding(): boolean {
    return this.outputTokenIds.length > 0 && this.numComputedTokens === this.allTokenIds.length - 1;
  }

  /**
   * Whether proposals may follow what the next step feeds: decoding, or computing again the tokens a verify step
   * accepted on a hybrid model (pendingStateRestore: those tokens and the target's next, then the proposals) after
   * one rollback. A rejection there sends the request back to the same start again, with more tokens to compute
   * again; a proposer that proposes at every step (an MTP head) could keep it there, computing ever more tokens again
   * each step. So after a second rollback in a row the step computes them again without proposals, and moves the
   * state on.
   */
  get mayTakeProposals(): boolean {
    return this.isDecoding || (this.pendingStateRestore >= 0 && this.numPlaceholders === 0 && this.numRollbacksInARow < 2);
  }

  get isFinished(): boolean {
    return this.status.startsWith('FINISHED');
  }

  /** A token the step being scheduled samples for its logits row `row`; returns its index in allTokenIds. */
  appendPlaceholder(row: number): number {
    this.outputTokenIds.push(-(row + 1));
    this.allTokenIds.push(-(row + 1));
    this.numPlaceholders++;
    return this.allTokenIds.length - 1;
  }

  /** Accepted tokens after the sampled one of a verify step (speculative decoding), known at once. */
  appendTokens(tokenIds: readonly number[]): void {
    if (this.numPlaceholders > 0) throw new Error(`request ${this.requestId}: tokens appended behind a placeholder`);
    this.outputTokenIds.push(...tokenIds);
    this.allTokenIds.push(...tokenIds);
  }

  /** The sampled token in the place appendPlaceholder returned (placeholders are filled in order). */
  fillPlaceholder(at: number, tokenId: number): void {
    const first = this.allTokenIds.length - this.numPlaceholders;
    if (at !== first) throw new Error(`request ${this.requestId}: token ${at} filled before token ${first}`);
    this.allTokenIds[at] = tokenId;
    this.outputTokenIds[at - this.promptTokenIds.length] = tokenId;
    this.numPlaceholders--;
  }
}
