// Speculative decoding in the engine (issue 41): before each schedule() every running request that decodes gets
// proposals, which the scheduler feeds after its last token as more tokens of that request in the flat batch; the
// runner verifies them (sampler.ts, rejection-sampler.ts) and the engine keeps the accepted ones, cut at the first
// stop, then counts them as vLLM's SpecDecodingStats do. The n-gram proposer's tokens are known before scheduling;
// a draft model's and an MTP head's are placeholders the scheduler makes room for, filled after it (fill():
// draft-proposer.ts and mtp-proposer.ts say why).
//
// Proposals need the request's tokens on the host, so no step is scheduled ahead of one whose tokens are unknown
// while a request could propose (EngineCore.canScheduleAhead): async scheduling's overlap is off for such steps.
// Structured-output requests are not speculated (their grammar matcher cannot take tokens back). On a hybrid model a
// verify step backs its rows' recurrent states up first, and a rejected proposal sends the state back to the backup
// and its accepted tokens to be computed again (Scheduler.updateFromOutput): a DeltaNet state cannot drop a token.

import type { SequenceSamplingState } from '../../sampling/sequence-state.js';
import { checkStop } from '../../sampling/stop.js';
import type { Request } from '../../scheduler/request.js';
import type { SpeculativeConfig } from './config.js';
import { proposeNgram } from './ngram-proposer.js';
import { DraftProposer } from './draft-proposer.js';
import { MtpProposer } from './mtp-proposer.js';
import type { ScheduledRequest } from '../../scheduler/scheduler.js';

type EngineReq = Request<SequenceSamplingState>;

/** vLLM's spec-decoding counters, cumulative. */
export interface SpecDecodingStats {
  /** Verify rows (a request's step with at least one proposal). */
  numDrafts: number;
  numDraftTokens: number;
  numAcceptedTokens: number;
  /** Per proposal position: how many times it was accepted (length numSpeculativeTokens). */
  numAcceptedTokensPerPos: number[];
  /** Draft-model or MTP-head forwards that failed (their rows fell back to proposals the target rejects unless it agrees). */
  numDraftFailures?: number;
}

export class SpecDecoding {
  private readonly counts: SpecDecodingStats;
  private readonly drafter: DraftProposer | null;
  private readonly mtp: MtpProposer | null;

  /** `proposer`: the draft model's (draft_model) or the MTP or EAGLE-3 head's (mtp, eagle3); none for n-gram. */
  constructor(readonly config: SpeculativeConfig, proposer: DraftProposer | MtpProposer | null = null) {
    this.drafter = proposer instanceof DraftProposer ? proposer : null;
    this.mtp = proposer instanceof MtpProposer ? proposer : null;
    const head = config.method === 'mtp' || config.method === 'eagle3';
    if ((config.method === 'draft_model') !== (this.drafter !== null) || head !== (this.mtp !== null)) {
      throw new Error(`SpecDecoding: ${config.method} with a ${proposer?.constructor.name ?? 'missing'} proposer`);
    }
    this.counts = { numDrafts: 0, numDraftTokens: 0, numAcceptedTokens: 0,
      numAcceptedTokensPerPos: new Array<number>(config.numSpeculativeTokens).fill(0) };
  }

  /**
   * Whether the request may get proposals: running, decoding its known last token (or computing again what a verify
   * step accepted on a hybrid model), no grammar, not opted out.
   */
  private eligible(req: EngineReq): boolean {
    return req.status === 'RUNNING' && req.mayTakeProposals && req.numPlaceholders === 0 && req.sampling?.constraint === null &&
      req.sampling.params.speculativeDecoding;
  }

  /** Speculation is off for a step of this many running requests (disable_by_batch_size). */
  private offFor(running: readonly EngineReq[]): boolean {
    return this.config.disableByBatchSize !== undefined && running.length >= this.config.disableByBatchSize;
  }

  /**
   * Whether the next step must wait for the last one's tokens on the host: when a running request could get
   * proposals (they are made from those tokens), and always while an MTP head runs (its catch-up of the last step's
   * hidden states needs the tokens after them, before the next step replaces them: mtp-proposer.ts).
   */
  needsTokensFirst(running: readonly EngineReq[]): boolean {
    if (this.mtp !== null && running.length > 0) return true;
    return !this.offFor(running) && running.some((r) => r.sampling?.constraint === null && r.sampling.params.speculativeDecoding);
  }

  /**
   * Sets every running request's proposals for the next schedule(): at most k, none past its max_tokens (nor, for
   * a draft model, past its context); none at all in a step of disable_by_batch_size running requests or more. A
   * draft model's and an MTP head's are placeholders (the last token) until fill(); the head's only for requests whose
   * hidden state the last step computed (MtpProposer.canPropose).
   */
  propose(running: readonly EngineReq[]): void {
    const c = this.config;
    const off = this.offFor(running);
    for (const req of running) {
      let room = Math.min(c.numSpeculativeTokens, req.maxTokens - req.numOutputTokens - 1);
      // the draft feeds proposals 1 .. k-1 back at positions n .. n+k-2
      if (this.drafter) room = Math.min(room, this.drafter.maxPositions - req.numTokens + 1);
      if (off || room <= 0 || !this.eligible(req) || (this.mtp !== null && !this.mtp.canPropose(req))) req.specTokenIds = [];
      else if (c.method === 'ngram') req.specTokenIds = proposeNgram(req.allTokenIds, room, c);
      else req.specTokenIds = new Array<number>(room).fill(req.allTokenIds[req.numTokens - 1]!);
    }
  }

  /**
   * After schedule(): a draft model's or an MTP head's proposals in the rows' placeholders (the n-gram's are there
   * already). The head sees every row, with proposals or not: it follows all the target computes.
   */
  fill(scheduled: readonly ScheduledRequest[], requestOf: (id: string) => EngineReq): void {
    if (this.mtp) this.mtp.fill(scheduled.map((row) => ({ req: requestOf(row.requestId), row })));
    if (!this.drafter) return;
    this.drafter.fill(scheduled.filter((r) => r.specTokenIds.length > 0 && r.sample).map((r) => ({ req: requestOf(r.requestId),
      blockTable: r.blockTable, specTokenIds: r.specTokenIds, tokenIds: r.tokenIds, seqLen: r.seqLen })));
  }

  /**
   * The tokens a verify row emits, cut after the first that ends the request (a stop token, max_tokens, the
   * context): nothing is emitted past a stop. Counts the row's proposals and acceptances (before the cut, as
   * vLLM counts them).
   */
  accept(req: EngineReq, numDraftTokens: number, tokenIds: readonly number[], eosTokenIds: readonly number[],
    maxModelLen: number): number[] {
    const numAccepted = tokenIds.length - 1;
    this.counts.numDrafts++;
    this.counts.numDraftTokens += numDraftTokens;
    this.counts.numAcceptedTokens += numAccepted;
    for (let j = 0; j < numAccepted; j++) this.counts.numAcceptedTokensPerPos[j]!++;
    const base = req.numSampledOutputTokens;
    for (let j = 0; j < tokenIds.length - 1; j++) {
      const stop = checkStop({ sampling: req.sampling!.params, numPromptTokens: req.numPromptTokens,
        numOutputTokens: base + j + 1, maxModelLen }, tokenIds[j]!, eosTokenIds);
      if (stop) return tokenIds.slice(0, j + 1);
    }
    return [...tokenIds];
  }

  /** Captures an MTP or EAGLE-3 head's graphs (MtpProposer.captureGraphs); the draft model's are its own. */
  captureGraphs(): void {
    this.mtp?.captureGraphs();
  }

  /** Frees the draft model's backend, if any. */
  dispose(): void {
    this.drafter?.dispose();
  }

  stats(): SpecDecodingStats {
    const proposer = this.drafter ?? this.mtp;
    return { ...this.counts, numAcceptedTokensPerPos: [...this.counts.numAcceptedTokensPerPos],
      ...(proposer ? { numDraftFailures: proposer.numFailures } : {}) };
  }
}
