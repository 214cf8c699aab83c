// Continuous batching under one token budget per step. Each request has
// numComputedTokens and numTokens; a step gives it
// min(numTokens - numComputedTokens, budget left), running requests first,
// then waiting ones. Chunked prefill falls out of the budget; preemption is by
// recompute (pages freed, numComputedTokens back to 0, requeued at the front).
// A hybrid model's recurrent state can only be saved for the prefix cache where
// a step ends, so with a state cache a prompt chunk that crosses a page end is
// cut at its last one (vLLM's align mode): one more step per prompt, at most.

import { NO_COMPUTED_BLOCKS, type KVCacheManager } from '../kv/kv-cache-manager.js';
import type { FinishedStatus, Request } from './request.js';
import { AdmissionTrace, formatTraceSummary, type TraceSummary } from './trace.js';

export type SchedulingPolicy = 'fcfs' | 'priority';
export type StepPolicy = 'decode-first' | 'prefill-first' | 'decode-shape-stable';

export interface SchedulerOptions {
  maxNumBatchedTokens: number;
  maxNumSeqs: number;
  blockSize: number;
  policy?: SchedulingPolicy;
  /**
   * decode-first: running rows (decodes) take the budget first.
   * prefill-first: while >= minWaitingPrompts prompts await their first token,
   *   up to maxDeferredRowsPerStep decode rows (latest streams first) sit out.
   * decode-shape-stable: a step with decode rows has no prompt tokens; prompt
   *   steps and decode steps alternate while both kinds of work are pending.
   */
  stepPolicy?: StepPolicy;
  /** Caps the tokens one prompt gets per step; 0 = off. */
  longPrefillTokenThreshold?: number;
  enableChunkedPrefill?: boolean;
  minWaitingPrompts?: number;
  maxDeferredRowsPerStep?: number;
  /**
   * Pipeline parallelism's micro-batches (1: off): up to this many steps outstanding, each of other requests, so each
   * stage works on a different one. A request whose sampled token is still on its way is not scheduled (its next
   * input is embedded on the first stage, the token sampled on the last), and a step takes at most a
   * microBatches-th of the requests that could run, so the next step has some left to take.
   */
  microBatches?: number;
  /**
   * Prompt positions a step computes logits of for prompt logprobs, at most (default 64: a row of logits each, on the
   * device, 19 MB at qwen3's vocabulary); a request that wants them gets prompt chunks no longer than what is left.
   */
  maxPromptLogitRows?: number;
  trace?: boolean;
}

export interface ScheduledRequest {
  requestId: string;
  /** Tokens fed this step: a prompt chunk, a recompute chunk, or the last sampled token. */
  tokenIds: number[];
  numScheduledTokens: number;
  /** = position of tokenIds[0]. */
  numComputedTokensBefore: number;
  /** Positions startPosition .. seqLen - 1; their slots are blockTable[p / blockSize] * blockSize + p % blockSize. */
  startPosition: number;
  /** = blockTables[kv.pagedGroup]: the first full-attention group's pages (every layer of a dense model). */
  blockTable: number[];
  /** The request's pages in every KV cache group, in group order (a recurrent group: [its state slot]). */
  blockTables: number[][];
  /** Its recurrent-state slot (a KV cache with a recurrent group: a hybrid model); absent without one. */
  stateSlot?: number;
  /** A prefix-cache hit on a hybrid model: before the step, the cached-state slot copied into stateSlot. */
  restoreStateFrom?: number;
  /** After the step (which ends at a page end of the prompt), stateSlot is copied into this cached-state slot. */
  saveStateTo?: number;
  /** Before the step (a verify step on a hybrid model), stateSlot is copied into this backup slot. */
  backupStateTo?: number;
  /**
   * Proposed tokens fed after the request's last token (speculative decoding; empty for others): tokenIds ends
   * with them, seqLen counts them, and the row wants logits for its last 1 + specTokenIds.length positions.
   */
  specTokenIds: number[];
  /** Pages newly taken from the pool this step, every group (page ids are global). */
  newBlockIds: number[];
  /** KV length after this step. */
  seqLen: number;
  /** Logits of the last token are sampled: the step reaches the end of the sequence. */
  sample: boolean;
  /** Prompt positions [promptLogitsFrom, promptLogitsTo) whose logits are wanted too (prompt logprobs). */
  promptLogitsFrom: number;
  promptLogitsTo: number;
  /** With sample: where in the request's allTokenIds the sampled token goes (a placeholder until then). */
  placeholderAt: number;
  /** Feeds prompt (or recompute) tokens without reaching the end: nothing is sampled. */
  isPrefillChunk: boolean;
  isDecode: boolean;
  /** First step since admission (new, or resumed after preemption). */
  isNewlyAdmitted: boolean;
  numCachedTokens: number;
}

export interface SchedulerOutput {
  stepIndex: number;
  scheduledRequests: ScheduledRequest[];
  numScheduledTokensTotal: number;
  preemptedRequestIds: string[];
  /** Finished or aborted since the previous step. */
  finishedRequestIds: string[];
}

export interface NewTokens {
  requestId: string;
  newTokenIds: number[];
}

interface Row {
  numNew: number;
  numComputedBefore: number;
  newBlockIds: number[];
  isNewlyAdmitted: boolean;
  /** The hit's cached-state slot (ComputedBlocks.stateSlot), or -1. */
  restoreStateFrom: number;
}

interface StepState {
  budget: number;
  /** Rows this step may take at most (micro-batches); Infinity: the budget alone decides. */
  maxRows: number;
  /** Prompt-logit rows left to this step (maxPromptLogitRows). */
  logitRows: number;
  rows: Map<Request, Row>;
  preempted: string[];
  numStarted: number;
}

type Accept = (req: Request) => boolean;

export class Scheduler {
  readonly waiting: Request[] = [];
  readonly running: Request[] = [];
  private readonly requests = new Map<string, Request>();
  private finishedSinceLastStep: string[] = [];
  /**
   * Scheduled steps whose tokens updateFromOutput has not had yet, oldest first (async scheduling: up to two;
   * pipeline micro-batches: up to microBatches).
   */
  private readonly outstanding: SchedulerOutput[] = [];
  private lastStepHadDecode = false;
  private readonly trace: AdmissionTrace | null;
  private readonly o: Required<SchedulerOptions>;
  numPreemptions = 0;
  numSteps = 0;

  constructor(options: SchedulerOptions, readonly kv: KVCacheManager) {
    this.o = {
      policy: 'fcfs', stepPolicy: 'decode-first', longPrefillTokenThreshold: 0,
      enableChunkedPrefill: true, minWaitingPrompts: 1, maxDeferredRowsPerStep: Number.MAX_SAFE_INTEGER,
      maxPromptLogitRows: 64, microBatches: 1, trace: false, ...definedOnly(options),
    };
    if (!Number.isInteger(this.o.microBatches) || this.o.microBatches < 1) throw new Error(`microBatches ${this.o.microBatches}`);
    if (options.blockSize !== kv.blockSize) {
      throw new Error(`scheduler blockSize ${options.blockSize} != kv blockSize ${kv.blockSize}`);
    }
    if (this.o.maxPromptLogitRows < 1) throw new Error('maxPromptLogitRows must be at least 1');
    if (this.o.maxNumBatchedTokens < 1 || this.o.maxNumSeqs < 1) throw new Error('empty token budget or seq cap');
    this.trace = this.o.trace ? new AdmissionTrace() : null;
  }

  get numRunning(): number { return this.running.length; }
  get numWaiting(): number { return this.waiting.length; }
  hasUnfinishedRequests(): boolean { return this.requests.size > 0; }
  getRequest(requestId: string): Request | undefined { return this.requests.get(requestId); }

  addRequest(req: Request): void {
    if (this.requests.has(req.requestId)) throw new Error(`duplicate request id ${req.requestId}`);
    // Groups share one pool: a request alone must fit with every group's pages together.
    const perGroup = this.kv.maxNumBlocksPerGroup(req.numPromptTokens + req.maxTokens).filter((n) => n > 0);
    const numBlocksAtMost = perGroup.reduce((a, n) => a + n, 0);
    if (numBlocksAtMost > this.kv.pool.numUsableBlocks) {
      const split = perGroup.length > 1 ? ` (${perGroup.join(' + ')} in its ${perGroup.length} groups)` : '';
      throw new Error(`request ${req.requestId} may need ${numBlocksAtMost} KV pages${split}; the cache has ${this.kv.pool.numUsableBlocks}`);
    }
    if (!this.o.enableChunkedPrefill && req.numPromptTokens > this.o.maxNumBatchedTokens) {
      throw new Error(`request ${req.requestId}: prompt of ${req.numPromptTokens} tokens exceeds ` +
        `maxNumBatchedTokens ${this.o.maxNumBatchedTokens} with chunked prefill off`);
    }
    req.status = 'WAITING';
    this.requests.set(req.requestId, req);
    this.waiting.push(req);
  }

  /**
   * The next step. One step may still be outstanding (scheduled, its tokens not yet given to
   * updateFromOutput): async scheduling plans a step while the previous one runs. An empty step is never
   * outstanding.
   */
  schedule(): SchedulerOutput {
    const micro = this.o.microBatches;
    const most = Math.max(2, micro);
    if (this.outstanding.length >= most) throw new Error(`schedule() with ${most} steps outstanding: updateFromOutput() first`);
    const numWaitingAtStart = this.waiting.length;
    // micro-batches: a share of what could run, so the next step (another stage's) has rows left
    const maxRows = micro === 1 ? Infinity
      : Math.ceil(Math.max(1, Math.min(this.o.maxNumSeqs, this.running.length + this.waiting.length)) / micro);
    const s: StepState = {
      budget: this.o.maxNumBatchedTokens, logitRows: this.o.maxPromptLogitRows, rows: new Map(), preempted: [], numStarted: 0,
      maxRows,
    };
    // proposals follow the last token: while a step is outstanding that token is not known (async scheduling)
    if (this.outstanding.length > 0) for (const r of this.running) if (micro === 1 || r.numPlaceholders > 0) r.specTokenIds = [];
    const { primary, admit, fallback } = this.planStep();
    this.scheduleRunning(s, primary);
    if (admit && s.preempted.length === 0) this.admitWaiting(s);
    const hasPromptWork = [...s.rows].some(([r, row]) => row.isNewlyAdmitted || !r.isDecoding);
    if (fallback !== null && !hasPromptWork) this.scheduleRunning(s, fallback);

    const out = this.buildOutput(s);
    this.lastStepHadDecode = out.scheduledRequests.some((r) => r.isDecode);
    if (out.scheduledRequests.length > 0) this.outstanding.push(out);  // an empty step gets no updateFromOutput
    this.numSteps++;
    this.trace?.record({
      numDecodeTokens: out.scheduledRequests.filter((r) => r.isDecode).length,
      numPromptTokens: out.scheduledRequests.reduce((a, r) => a + (r.isDecode ? 0 : r.numScheduledTokens), 0),
      numWaitingPrompts: numWaitingAtStart,
      numStartedPrompts: s.numStarted,
      numContinuedPrompts: out.scheduledRequests.filter((r) => !r.isDecode && !r.isNewlyAdmitted).length,
      numPreemptions: s.preempted.length,
    });
    return out;
  }

  /**
   * The sampled tokens of the oldest outstanding step, one per sampling row, in place of its placeholders.
   * Requests finished or aborted since it was scheduled are skipped; a request preempted since keeps its
   * token (its row ran before its pages were given away). A row with k proposed tokens takes 1 .. k + 1 tokens
   * (the accepted proposals, then the target's next one): the KV of the rejected proposals is rolled back
   * (numComputedTokens rewinds, pages left empty go back to the pool).
   */
  updateFromOutput(sampled: ReadonlyMap<string, readonly number[]> | Readonly<Record<string, readonly number[]>>):
    NewTokens[] {
    const out = this.outstanding.shift();
    if (out === undefined) throw new Error('updateFromOutput() without a scheduled step');
    const get = (id: string) => (sampled instanceof Map ? sampled.get(id)
      : (sampled as Readonly<Record<string, readonly number[]>>)[id]);
    const news: NewTokens[] = [];
    for (const row of out.scheduledRequests) {
      const req = this.requests.get(row.requestId);
      if (req === undefined || !row.sample) continue;
      const tokens = get(row.requestId);
      const numSpec = row.specTokenIds.length;
      if (tokens === undefined || tokens.length < 1 || tokens.length > 1 + numSpec) {
        throw new Error(`request ${row.requestId}: ${tokens?.length ?? 0} sampled tokens, expected ${numSpec > 0 ? `1 to ${1 + numSpec}` : 1}`);
      }
      req.fillPlaceholder(row.placeholderAt, tokens[0]!);
      if (tokens.length > 1) req.appendTokens(tokens.slice(1));
      const numRejected = numSpec - (tokens.length - 1);
      // a request preempted since holds no pages and recomputes from 0
      if (numRejected > 0 && req.status === 'RUNNING') {
        // a hybrid model's state took the rejected tokens in too: it goes back to its backup from before the step,
        // whose tokens (but the rejected) the next step computes again, into the pages that hold them (their K and V
        // are right: the pages stay, registered or not)
        const backup = row.backupStateTo ?? -1;
        const numKept = req.numComputedTokens - numRejected;
        if (backup >= 0) req.pendingStateRestore = backup;
        req.numRollbacksInARow = backup >= 0 ? req.numRollbacksInARow + 1 : 0;
        req.numComputedTokens = backup >= 0 ? row.numComputedTokensBefore : numKept;
        this.kv.removeTail(req, numKept);
      } else {
        req.numRollbacksInARow = 0;
      }
      news.push({ requestId: row.requestId, newTokenIds: [...tokens] });
    }
    return news;
  }

  /** Ends requests at once (stop, length, abort, error): their pages are freed. */
  finishRequests(requestIds: Iterable<string>, status: FinishedStatus): void {
    for (const id of requestIds) {
      const req = this.requests.get(id);
      if (req === undefined) continue;
      removeFrom(this.running, req);
      removeFrom(this.waiting, req);
      this.kv.free(req);
      req.status = status;
      this.requests.delete(id);
      this.finishedSinceLastStep.push(id);
    }
  }

  abortRequest(requestId: string): void {
    this.finishRequests([requestId], 'FINISHED_ABORTED');
  }

  traceSummary(): TraceSummary | null {
    return this.trace?.summary() ?? null;
  }

  formatTraceSummary(): string {
    const s = this.traceSummary();
    return s === null ? 'scheduler trace is off' : formatTraceSummary(s);
  }

  private planStep(): { primary: Accept; admit: boolean; fallback: Accept | null } {
    const all: Accept = () => true;
    if (this.o.stepPolicy === 'decode-shape-stable') {
      const hasDecode = this.running.some((r) => r.isDecoding);
      const hasPrompt = this.running.some((r) => !r.isDecoding) ||
        (this.waiting.length > 0 && this.running.length < this.o.maxNumSeqs);
      const promptStep = hasPrompt && (!hasDecode || this.lastStepHadDecode);
      return promptStep
        ? { primary: (r) => !r.isDecoding, admit: true, fallback: (r) => r.isDecoding }
        : { primary: (r) => r.isDecoding, admit: false, fallback: null };
    }
    if (this.o.stepPolicy === 'prefill-first') {
      const canAdmit = this.running.length < this.o.maxNumSeqs;
      const numAwaitingFirstToken = this.running.filter((r) => r.numOutputTokens === 0).length +
        (canAdmit ? this.waiting.filter((r) => r.numOutputTokens === 0).length : 0);
      if (numAwaitingFirstToken < this.o.minWaitingPrompts) return { primary: all, admit: true, fallback: null };
      const decoding = this.running.filter((r) => r.isDecoding);
      const deferred = new Set(decoding.slice(Math.max(0, decoding.length - this.o.maxDeferredRowsPerStep)));
      if (deferred.size === 0) return { primary: all, admit: true, fallback: null };
      return { primary: (r) => !deferred.has(r), admit: true, fallback: (r) => deferred.has(r) };
    }
    return { primary: all, admit: true, fallback: null };
  }

  private scheduleRunning(s: StepState, accept: Accept): void {
    for (const req of [...this.running]) {
      if (s.budget <= 0 || s.rows.size >= s.maxRows) break;
      if (req.status !== 'RUNNING' || s.rows.has(req) || !accept(req)) continue;
      // micro-batches: its next input is the token an outstanding step is still sampling
      if (this.o.microBatches > 1 && req.numPlaceholders > 0) continue;
      if (req.numOutputTokens >= req.maxTokens) continue;  // its last token is scheduled: it ends when that comes
      if (req.specTokenIds.length > 0 && !req.mayTakeProposals) req.specTokenIds = [];
      let numNew = this.numTokensFor(req, req.numComputedTokens, s);
      if (numNew <= 0) continue;
      // proposals past the budget are dropped (they are only guesses), never the token they follow
      const numSpec = Math.max(0, numNew - (req.numTokens - req.numComputedTokens));
      if (numSpec < req.specTokenIds.length) req.specTokenIds = req.specTokenIds.slice(0, numSpec);
      let newBlockIds: number[] | null = null;
      for (;;) {
        newBlockIds = this.kv.allocateSlots(req, numNew);
        if (newBlockIds !== null) break;
        if (req.specTokenIds.length > 0) {
          // short of pages: the proposals go before anyone is preempted for them
          numNew -= req.specTokenIds.length;
          req.specTokenIds = [];
          continue;
        }
        const victim = this.pickVictim();
        this.preempt(victim, s);
        if (victim === req) break;
      }
      if (newBlockIds === null) continue;
      s.rows.set(req, { numNew, numComputedBefore: req.numComputedTokens, newBlockIds, isNewlyAdmitted: false,
        restoreStateFrom: req.pendingStateRestore });
      s.budget -= numNew;
      s.logitRows -= promptLogitRows(req, req.numComputedTokens, numNew);
    }
  }

  private admitWaiting(s: StepState): void {
    while (this.waiting.length > 0 && s.budget > 0 && this.running.length < this.o.maxNumSeqs && s.rows.size < s.maxRows) {
      const req = this.peekWaiting();
      if (req.numPlaceholders > 0) break;
      req.specTokenIds = [];  // preempted with a token still to come: resumes once it has it
      // prompt logits still wanted: every position is computed (vLLM skips the prefix cache the same way)
      const computed = req.numPromptLogitsLeft > 0 ? NO_COMPUTED_BLOCKS : this.kv.getComputedBlocks(req);
      const numUncached = req.numTokens - computed.numCachedTokens;
      // Chunking off holds for first prompts; a recompute after preemption may still be chunked.
      if (!this.o.enableChunkedPrefill && req.numOutputTokens === 0 && numUncached > s.budget) break;
      req.stateSavePoint = computed.numMatchedTokens ?? 0;
      const numNew = this.numTokensFor(req, computed.numCachedTokens, s);
      if (numNew <= 0) break;  // this step's prompt-logit rows are spent
      const newBlockIds = this.kv.allocateSlots(req, numNew, computed);
      if (newBlockIds === null) break;
      removeFrom(this.waiting, req);
      this.running.push(req);
      req.status = 'RUNNING';
      req.numComputedTokens = computed.numCachedTokens;
      if (req.numCachedTokens < 0) req.numCachedTokens = computed.numCachedTokens;
      s.rows.set(req, { numNew, numComputedBefore: req.numComputedTokens, newBlockIds, isNewlyAdmitted: true,
        restoreStateFrom: computed.stateSlot ?? -1 });
      s.budget -= numNew;
      s.logitRows -= promptLogitRows(req, req.numComputedTokens, numNew);
      s.numStarted++;
    }
  }

  private numTokensFor(req: Request, numComputed: number, s: StepState): number {
    let n = req.numTokens + req.specTokenIds.length - numComputed;
    if (this.o.longPrefillTokenThreshold > 0) n = Math.min(n, this.o.longPrefillTokenThreshold);
    n = Math.min(n, s.budget);
    // A chunk that would compute wanted prompt logits stops where this step's rows run out.
    const from = Math.max(numComputed, req.promptLogitsDone);
    if (from < req.numPromptTokens - 1 && from < numComputed + n) n = Math.min(n, from - numComputed + Math.max(0, s.logitRows));
    if (this.kv.cachesStates) {
      // the state is saved where the step ends: end at the chunk's last page end within the prompt
      const bs = this.o.blockSize;
      const lastPageEnd = Math.floor(Math.min(numComputed + n, req.numPromptTokens) / bs) * bs;
      if (lastPageEnd > numComputed) n = lastPageEnd - numComputed;
      // and first where its prompt stopped matching a cached one: the next prompt of that prefix hits it whole
      const point = req.stateSavePoint;
      if (point > numComputed && point < numComputed + n && point <= req.numPromptTokens) n = point - numComputed;
    }
    return n;
  }

  private peekWaiting(): Request {
    if (this.o.policy === 'fcfs') return this.waiting[0]!;
    return this.waiting.reduce((best, r) => (before(r, best) ? r : best));
  }

  /** FCFS: the last running request; priority: the lowest priority, latest arrival. */
  private pickVictim(): Request {
    if (this.o.policy === 'fcfs') return this.running[this.running.length - 1]!;
    return this.running.reduce((worst, r) => (before(worst, r) ? r : worst));
  }

  private preempt(victim: Request, s: StepState): void {
    removeFrom(this.running, victim);
    const row = s.rows.get(victim);
    if (row !== undefined) {
      s.budget += row.numNew;
      s.rows.delete(victim);
    }
    this.kv.free(victim);
    victim.numComputedTokens = 0;
    victim.specTokenIds = [];
    victim.pendingStateRestore = -1;  // its state is computed again from the start (or a cached one)
    victim.numRollbacksInARow = 0;
    victim.status = 'PREEMPTED';
    victim.numPreemptions++;
    this.waiting.unshift(victim);
    this.numPreemptions++;
    s.preempted.push(victim.requestId);
  }

  private buildOutput(s: StepState): SchedulerOutput {
    const scheduledRequests: ScheduledRequest[] = [];
    let total = 0;
    let numSampled = 0;
    for (const [req, row] of s.rows) {
      const start = row.numComputedBefore;
      const seqLen = start + row.numNew;
      const blockTables = this.kv.blockTables(req.requestId).map((t) => t.slice());
      const specTokenIds = req.specTokenIds;
      req.specTokenIds = [];
      const sample = seqLen - specTokenIds.length === req.numTokens;
      const isDecode = req.isDecoding;
      const tokenIds = req.allTokenIds.slice(start, seqLen - specTokenIds.length).concat(specTokenIds);
      const promptLogitsFrom = Math.max(start, req.promptLogitsDone);
      const promptLogitsTo = Math.max(promptLogitsFrom, Math.min(seqLen, req.numPromptTokens - 1));
      req.promptLogitsDone = Math.max(req.promptLogitsDone, promptLogitsTo);
      // the step computes these tokens: the next schedule() may run before its tokens come back
      req.numComputedTokens = seqLen;
      scheduledRequests.push({
        requestId: req.requestId, tokenIds, numScheduledTokens: row.numNew,
        numComputedTokensBefore: start, startPosition: start, blockTable: blockTables[this.kv.pagedGroup]!, blockTables,
        specTokenIds, newBlockIds: row.newBlockIds, seqLen, sample, promptLogitsFrom, promptLogitsTo, placeholderAt: sample ? req.appendPlaceholder(numSampled++) : -1,
        isPrefillChunk: !sample, isDecode, isNewlyAdmitted: row.isNewlyAdmitted,
        numCachedTokens: Math.max(0, req.numCachedTokens),
        ...(this.kv.hasStateSlots ? { stateSlot: this.kv.stateSlot(req.requestId) } : {}),
      });
      total += row.numNew;
    }
    // after every admission of this step: a state saved by this step is no hit before the next one
    for (const r of scheduledRequests) {
      const req = this.requests.get(r.requestId)!;
      const row = s.rows.get(req)!;
      if (row.restoreStateFrom >= 0) r.restoreStateFrom = row.restoreStateFrom;
      req.pendingStateRestore = -1;
      const backup = r.specTokenIds.length > 0 ? this.kv.specBackupSlot(req.requestId) : -1;
      if (backup >= 0) r.backupStateTo = backup;
      const slot = r.seqLen <= req.numPromptTokens ? this.kv.saveStateSlot(req, r.seqLen) : null;
      if (slot !== null) r.saveStateTo = slot;
    }
    const out: SchedulerOutput = {
      stepIndex: this.numSteps, scheduledRequests, numScheduledTokensTotal: total,
      preemptedRequestIds: s.preempted, finishedRequestIds: this.finishedSinceLastStep,
    };
    this.finishedSinceLastStep = [];
    return out;
  }
}

/** Wanted prompt-logit positions among the numNew tokens after numComputed. */
function promptLogitRows(req: Request, numComputed: number, numNew: number): number {
  const from = Math.max(numComputed, req.promptLogitsDone);
  return Math.max(0, Math.min(numComputed + numNew, req.numPromptTokens - 1) - from);
}

/** Lower priority value first, then earlier arrival. */
function before(a: Request, b: Request): boolean {
  return a.priority < b.priority || (a.priority === b.priority && a.arrivalTime < b.arrivalTime);
}

function definedOnly<T extends object>(o: T): T {
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined)) as T;
}

function removeFrom(list: Request[], req: Request): void {
  const i = list.indexOf(req);
  if (i >= 0) list.splice(i, 1);
}
