// The engine step, as vLLM v1's EngineCore.step: schedule (scheduler/) -> execute (runner/model-runner.ts: one
// forward over the flat batch, tokens sampled) -> update (append tokens, stop checks, free finished) -> outputs.
// beginStep() is the first two, completeStep() waits and updates. The step loop (advance) overlaps them: with
// async scheduling, step n+1 is scheduled and launched before step n's tokens reach the host; under pipeline
// parallelism, up to one step a stage is in flight, each of other requests (advanceMicroBatches).

import { TOKEN_READS_IN_FLIGHT, type Backend } from '../backend/backend.js';
import { readKnob } from '../knobs/knobs.js';
import { KVCacheManager } from '../kv/kv-cache-manager.js';
import type { ModelConfig } from '../loader/types.js';
import type { Model } from '../model/model.js';
import { isDeviceSamplable } from '../sampling/device-sampling.js';
import { Sampler } from '../sampling/sampler.js';
import type { SequenceSamplingState } from '../sampling/sequence-state.js';
import { checkStop } from '../sampling/stop.js';
import { Request } from '../scheduler/request.js';
import { Scheduler, type SchedulerOutput } from '../scheduler/scheduler.js';
import { kvCacheGroupsOf } from './kv-groups.js';
import { ModelRunner, type RowRequests, type StepOutput } from './runner/model-runner.js';
import type { GrammarVocab, GrammarVocabFile, TokenConstraint } from '../sampling/structured-output.js';
import { RequestGrammars } from './request-grammars.js';
import type { ResolvedEngineOptions } from './options.js';
import type { EngineInfo } from './worker-protocol.js';
import { SpecDecoding } from './spec/spec-decode.js';
import type { DraftProposer } from './spec/draft-proposer.js';
import { headProposer } from './spec/mtp-proposer.js';
import type { EngineOutput, EngineRequest, EngineStats, FinishReason, PoolingParams, TokenLogprob } from './types.js';
import { poolEmbedding } from './pooling.js';
import type { RankLeader } from './tp/leader.js';
import type { KVCacheGroup } from '../kv/kv-cache-spec.js';

export { maxModelLenRefusal } from './max-model-len.js';

type EngineReq = Request<SequenceSamplingState>;

/** A step launched by beginStep(), for completeStep(). */
export interface PendingStep {
  /** Outputs already known (errors of rejected requests). */
  outputs: EngineOutput[];
  /** sampledOnDevice: its tokens stay where the next step's input ids can name them (async scheduling). */
  work: { so: SchedulerOutput; rows: EngineReq[]; wait: () => StepOutput; sampledOnDevice: boolean } | null;
}

export interface EngineCoreParts {
  model: Model;
  backend: Backend;
  numBlocks: number;
  /** A hybrid model's recurrent-state slots (sizeKvCache); absent or 0 for others. */
  numStateSlots?: number;
  /** Its slots for states saved for the prefix cache (sizeKvCache), after the numStateSlots; absent or 0: none. */
  numCachedStateSlots?: number;
  eosTokenIds: number[];
  maxModelLen: number;
  /** Tensor and pipeline parallelism's other ranks (engine/tp/), which follow every step; null or absent on one device. */
  tp?: RankLeader | null;
  /** The whole model's KV cache groups where `model` is one pipeline stage (tp/stage-kv.ts); absent: the model's. */
  kvGroups?: KVCacheGroup[];
  /** A draft model's proposer (--speculative-config's draft_model); absent or null: none. */
  drafter?: DraftProposer | null;
  /** The vocabulary for structured outputs (read by each grammar host, or on first use); absent: such requests fail. */
  grammarVocab?: GrammarVocabFile | (() => GrammarVocab);
  info: Omit<EngineInfo, 'numBlocks' | 'numStateSlots' | 'numCachedStateSlots' | 'blockSize' | 'maxModelLen' | 'vocabSize' | 'maxNumBatchedTokens' | 'maxNumSeqs'>;
}

export class EngineCore {
  readonly scheduler: Scheduler;
  readonly kv: KVCacheManager;
  readonly info: EngineInfo;
  private readonly pending: EngineOutput[] = [];
  /** Called when work arrives outside addRequest (a structured output's matcher is ready): the driver's kick. */
  onWork: (() => void) | null = null;
  /** Structured outputs' matchers, made in grammar hosts off this thread; null without a vocabulary. */
  readonly grammars: RequestGrammars | null;
  /** Prompt logprobs made so far of requests that have not had their first token yet. */
  private readonly promptLogprobsOf = new WeakMap<EngineReq, TokenLogprob[]>();
  /** Embedding requests not yet finished, with how their hidden state is pooled. */
  private readonly poolingOf = new Map<string, PoolingParams>();
  /** Steps advance() launched and has not completed, oldest first: one (async scheduling), or the micro-batches. */
  private inFlight: PendingStep[] = [];
  /** Pipeline parallelism's micro-batches: steps kept in flight, each of other requests (1: one at a time). */
  readonly microBatches: number;
  private readonly model: Model;
  private readonly tp: RankLeader | null;
  /** Runs each scheduled step on the device (flat batch, graphs, launch path). */
  readonly runner: ModelRunner;
  /** What the runner asks about a row's request. */
  private readonly rowRequests: RowRequests;
  private readonly config: ModelConfig;
  private readonly eosTokenIds: readonly number[];
  private readonly sampler: Sampler;
  /** Speculative decoding (--speculative-config); null: off. */
  private readonly spec: SpecDecoding | null;
  private numPromptTokens = 0;
  private numGenerationTokens = 0;
  private numSteps = 0;
  private numStepsScheduledAhead = 0;
  private numRunningPeak = 0;
  private executeMs = 0;
  private minBytesRead = 0;
  private stepMs = 0;

  constructor(parts: EngineCoreParts, readonly options: ResolvedEngineOptions) {
    this.model = parts.model;
    this.config = parts.model.config;
    this.eosTokenIds = [...parts.eosTokenIds];
    this.sampler = new Sampler({ vocabSize: this.config.vocabSize, eosTokenIds: this.eosTokenIds, seed: options.seed });
    this.tp = parts.tp ?? null;
    this.runner = new ModelRunner(parts.model, this.sampler, { ...options, mirror: this.tp?.mirror }, this.eosTokenIds);
    const mtp = headProposer(parts.model, options, (id) => this.kv.blockTable(id));
    this.spec = options.speculativeConfig ? new SpecDecoding(options.speculativeConfig, parts.drafter ?? mtp) : null;
    this.microBatches = pipelineMicroBatches(options);
    const poolingOf = this.poolingOf;
    this.rowRequests = {
      promptOf: (id) => {
        const req = this.scheduler.getRequest(id) as EngineReq;
        return { promptTokenIds: req.promptTokenIds, promptLogprobs: req.sampling!.params.promptLogprobs };
      },
      isPooling: (id) => poolingOf.has(id),
      get hasPooling() {
        return poolingOf.size > 0;
      },
    };
    this.grammars = parts.grammarVocab ? new RequestGrammars(parts.grammarVocab, { maxHosts: options.grammarHosts }) : null;
    const groups = parts.kvGroups ?? kvCacheGroupsOf(parts.model);
    this.kv = new KVCacheManager({ numBlocks: parts.numBlocks, blockSize: options.blockSize, groups,
      enablePrefixCaching: options.enablePrefixCaching, numStateSlots: parts.numStateSlots ?? 0,
      numCachedStateSlots: parts.numCachedStateSlots ?? 0, specBackupSlots: this.spec !== null });
    this.scheduler = new Scheduler({
      maxNumBatchedTokens: options.maxNumBatchedTokens,
      maxNumSeqs: options.maxNumSeqs,
      blockSize: options.blockSize,
      policy: options.schedulingPolicy,
      stepPolicy: options.stepPolicy,
      enableChunkedPrefill: options.enableChunkedPrefill,
      longPrefillTokenThreshold: options.longPrefillTokenThreshold,
      microBatches: this.microBatches,
      trace: options.schedulerTrace,
    }, this.kv);
    this.info = {
      ...parts.info, numBlocks: parts.numBlocks, numStateSlots: this.kv.numStateSlots,
      numCachedStateSlots: this.kv.numCachedStateSlots, blockSize: options.blockSize,
      maxModelLen: parts.maxModelLen, vocabSize: this.config.vocabSize,
      maxNumBatchedTokens: options.maxNumBatchedTokens, maxNumSeqs: options.maxNumSeqs,
    };
  }

  addRequest(r: EngineRequest): void {
    if (r.pooling && r.promptTokenIds.length > this.info.maxModelLen) {
      this.pending.push(this.errorOutput(r.requestId, `the input (${r.promptTokenIds.length} tokens) exceeds the `
        + `context length ${this.info.maxModelLen}`));
      return;
    }
    const total = r.promptTokenIds.length + r.sampling.maxTokens;
    if (!r.pooling && total > this.info.maxModelLen) {
      this.pending.push(this.errorOutput(r.requestId, `prompt (${r.promptTokenIds.length} tokens) plus max_tokens `
        + `(${r.sampling.maxTokens}) exceeds the context length ${this.info.maxModelLen}`));
      return;
    }
    const numPagesAtMost = Math.ceil(total / this.options.blockSize);
    if (numPagesAtMost > this.kv.pool.numUsableBlocks) {
      // can never be scheduled: refused on its own, the engine serves on (the scheduler would throw)
      this.pending.push(this.errorOutput(r.requestId, `prompt (${r.promptTokenIds.length} tokens) plus max_tokens `
        + `(${r.sampling.maxTokens}) may need ${numPagesAtMost} KV pages; the cache has ${this.kv.pool.numUsableBlocks}`));
      return;
    }
    const bad = r.promptTokenIds.find((t) => !Number.isInteger(t) || t < 0 || t >= this.config.vocabSize);
    if (bad !== undefined) {
      this.pending.push(this.errorOutput(r.requestId, `token id ${bad} is outside the vocabulary [0, ${this.config.vocabSize})`));
      return;
    }
    const spec = r.sampling.structuredOutput;
    if (spec === null) {
      this.schedule(r, null);
      return;
    }
    if (this.grammars === null) {
      this.pending.push(this.errorOutput(r.requestId, 'structured outputs need the model\'s tokenizer.json'));
      return;
    }
    // The grammar compiles in a grammar host, never on this thread (vLLM's requests wait for theirs too); the request
    // is scheduled once its matcher is ready, and the others step on meanwhile.
    this.grammars.start(r.requestId, spec, (c) => {
      this.schedule(r, c);
      this.onWork?.();
    }, (why) => {
      this.pending.push(this.errorOutput(r.requestId, `the structured output does not compile: ${why}`));
      this.onWork?.();
    });
  }

  private schedule(r: EngineRequest, constraint: TokenConstraint | null): void {
    if (r.pooling) this.poolingOf.set(r.requestId, r.pooling);
    const sampler = this.sampler.newSequenceState(r.sampling, r.promptTokenIds);
    sampler.constraint = constraint;
    this.scheduler.addRequest(new Request<SequenceSamplingState>({
      requestId: r.requestId, promptTokenIds: r.promptTokenIds, maxTokens: r.sampling.maxTokens,
      priority: r.priority, arrivalTime: r.arrivalTime, cacheSalt: r.cacheSalt, sampling: sampler,
      promptLogits: r.sampling.promptLogprobs !== null,
    }));
  }

  /** Structured-output matchers held or awaited (tests: none leak). */
  get numConstraints(): number {
    return this.grammars === null ? 0 : this.grammars.numHeld + this.grammars.numWaiting;
  }

  /** Ends the requests whose grammar host failed under them, each with an error; the others step on. */
  private failBroken(): EngineOutput[] {
    if (this.grammars === null || this.grammars.numHeld === 0) return [];
    return this.grammars.broken().map(([requestId, why]) => {
      this.scheduler.finishRequests([requestId], 'FINISHED_ERROR');
      this.grammars!.release(requestId);
      return this.errorOutput(requestId, why);
    });
  }

  /** Frees the request's pages at once; returns its final output. */
  abortRequest(requestId: string): EngineOutput[] {
    if (this.grammars?.cancel(requestId)) return [{ requestId, newTokenIds: [], finished: true, finishReason: 'abort' }];
    if (!this.scheduler.getRequest(requestId)) return [];
    this.scheduler.abortRequest(requestId);
    this.poolingOf.delete(requestId);
    this.grammars?.release(requestId);
    return [{ requestId, newTokenIds: [], finished: true, finishReason: 'abort' }];
  }

  hasWork(): boolean {
    return this.inFlight.length > 0 || this.pending.length > 0 || this.scheduler.hasUnfinishedRequests();
  }

  /** One step, launched and completed (after any step advance() left in flight). */
  step(): EngineOutput[] {
    const done = this.drain();
    return done.concat(this.completeStep(this.beginStep()));
  }

  /** Completes the steps advance() left in flight, if any, oldest first. */
  drain(): EngineOutput[] {
    const prev = this.inFlight.splice(0);
    return prev.flatMap((p) => this.completeStep(p));
  }

  /**
   * One turn of the step loop: launches the next step and completes the one launched by the previous turn,
   * returning its outputs while the new one runs on the device. With async scheduling (as vLLM's
   * --async-scheduling) the next step is scheduled and launched before the previous one's tokens reach the
   * host: its rows feed them from the device (negative input ids), and a row whose request that step ends
   * (a stop token) is computed once more and dropped; so the device never waits on the host's scheduling.
   * Otherwise the previous step completes first. The transcripts are the same either way.
   */
  advance(): EngineOutput[] {
    if (this.microBatches > 1) return this.advanceMicroBatches();
    const prev = this.inFlight.shift() ?? null;
    let outputs: EngineOutput[] = [];
    const ahead = prev !== null && this.canScheduleAhead(prev);
    if (prev && !ahead) outputs = this.completeStep(prev);
    const next = this.pending.length > 0 || this.scheduler.hasUnfinishedRequests() ? this.beginStep() : null;
    if (prev && ahead) {
      if (next?.work) this.numStepsScheduledAhead++;
      outputs = this.completeStep(prev);
    }
    if (next?.work) this.inFlight.push(next);
    else if (next) outputs = outputs.concat(next.outputs);
    return outputs;
  }

  /**
   * advance() under pipeline parallelism (vLLM's batch queue): launches a step while fewer than microBatches are in
   * flight, each of requests no step in flight holds (Scheduler microBatches), so while the last stage (this rank)
   * works on one step the stages before it work on the next ones; completes the oldest once the queue is full or
   * nothing more can be launched. On CUDA a launch only enqueues (its tokens are waited for at completion); on the
   * CPU backend each step runs through the stages as it is launched, and the transcripts are the same.
   */
  private advanceMicroBatches(): EngineOutput[] {
    let outputs: EngineOutput[] = [];
    const room = this.inFlight.length < this.microBatches;
    const next = room && (this.pending.length > 0 || this.scheduler.hasUnfinishedRequests()) ? this.beginStep() : null;
    if (next?.work) {
      if (this.inFlight.length > 0) this.numStepsScheduledAhead++;
      this.inFlight.push(next);
    } else if (next) {
      outputs = next.outputs;
    }
    if (this.inFlight.length > 0 && (!room || !next?.work)) outputs = outputs.concat(this.completeStep(this.inFlight.shift()!));
    return outputs;
  }

  /**
   * Whether the step after `prev` may be scheduled before prev's tokens are known: prev sampled on the
   * device, and no running request's sampling depends on its tokens being counted (host-sampled rows: logprobs,
   * penalties, bias, a min_tokens stop mask not yet met). Not in profile mode (a graph's timing events are
   * read once per replay).
   */
  private canScheduleAhead(prev: PendingStep): boolean {
    if (!this.options.asyncScheduling || this.options.profile || !prev.work?.sampledOnDevice) return false;
    // pipeline stages: the tokens are sampled on the last stage (this rank), the next step's ids embedded on the first
    // (their steps overlap by micro-batches of other requests instead: advanceMicroBatches)
    if (this.options.pipelineParallelSize > 1) return false;
    // proposals are made from the tokens on the host, and an MTP head's catch-up needs them (spec/spec-decode.ts)
    if (this.spec?.needsTokensFirst(this.scheduler.running as EngineReq[])) return false;
    return this.scheduler.running.every((r) => {
      const st = (r as EngineReq).sampling!;
      return isDeviceSamplable(st, this.eosTokenIds) && st.numOutputTokens >= st.params.minTokens;
    });
  }

  /**
   * Schedules a step and launches it on the device; completeStep() waits for it
   * and turns it into outputs. Between the two the caller may do host work
   * (deliver the previous step's outputs) while the device runs, but must not
   * add or abort requests.
   */
  beginStep(): PendingStep {
    const outputs = this.pending.splice(0).concat(this.failBroken());
    if (!this.scheduler.hasUnfinishedRequests()) return { outputs, work: null };
    const t0 = performance.now();
    try {
      this.spec?.propose(this.scheduler.running as EngineReq[]);
      const so = this.scheduler.schedule();
      if (so.scheduledRequests.length === 0) return { outputs, work: null };
      this.spec?.fill(so.scheduledRequests, (id) => this.scheduler.getRequest(id) as EngineReq);
      const rows = this.countStep(so);
      const te = performance.now();
      const { wait, sampledOnDevice } = this.runner.execute(so.scheduledRequests, rows.map((r) => r.sampling!), this.rowRequests);
      this.executeMs += performance.now() - te;
      return { outputs, work: { so, rows, wait, sampledOnDevice } };
    } finally {
      this.stepMs += performance.now() - t0;
    }
  }

  /** A scheduled step's counts (for stats and the roofline); returns the requests of its sampled rows, in order. */
  private countStep(so: SchedulerOutput): EngineReq[] {
    this.numSteps++;
    this.numRunningPeak = Math.max(this.numRunningPeak, this.scheduler.running.length);
    const rows: EngineReq[] = [];
    let numKvTokensRead = 0;
    for (const r of so.scheduledRequests) {
      numKvTokensRead += r.seqLen;
      if (!r.isDecode) this.numPromptTokens += r.numScheduledTokens;
      if (r.sample) rows.push(this.scheduler.getRequest(r.requestId) as EngineReq);
    }
    this.minBytesRead += this.info.weightBytesPerStep + numKvTokensRead * this.info.kvBytesPerToken
      + so.scheduledRequests.length * 2 * this.info.bytesPerStateSlot;  // a hybrid's states: read and written
    return rows;
  }

  /** Waits for a launched step, then updates the requests from its output (vLLM's update_from_output). */
  completeStep(step: PendingStep): EngineOutput[] {
    const { outputs, work } = step;
    if (!work) return outputs;
    const t0 = performance.now();
    const { so, rows } = work;
    const { tokenIds, logprobs, promptLogprobs, pooled, verified } = work.wait();
    this.executeMs += performance.now() - t0;
    // a row whose matcher's host failed during the step was sampled unmasked: its request ends here, its token unsent
    outputs.push(...this.failBroken());
    if (pooled) outputs.push(...this.finishPooled(pooled));
    for (const [id, lps] of promptLogprobs ?? []) {
      const req = this.scheduler.getRequest(id) as EngineReq | undefined;
      if (req === undefined) continue;
      const acc = this.promptLogprobsOf.get(req);
      if (acc) acc.push(...lps);
      else this.promptLogprobsOf.set(req, lps);
    }
    const sampled = new Map<string, number[]>();
    const logprobsOf = new Map<string, NonNullable<EngineOutput['logprobs']>>();
    const numDraftsOf = verified ? new Map(so.scheduledRequests.map((r) => [r.requestId, r.specTokenIds.length])) : null;
    rows.forEach((req, i) => {
      if (pooled?.has(req.requestId) || this.scheduler.getRequest(req.requestId) !== req) return;
      const v = verified?.[i];
      // a verify row's accepted tokens, cut at a stop; their logprobs are the target's
      const tokens = v ? this.spec!.accept(req, numDraftsOf!.get(req.requestId)!, v.tokenIds, this.eosTokenIds,
        this.info.maxModelLen) : [tokenIds[i]!];
      sampled.set(req.requestId, tokens);
      req.sampling!.appendOutputTokens(tokens);
      const lps = v ? v.logprobs.slice(0, tokens.length) : [logprobs[i] ?? null];
      if (lps[0]) logprobsOf.set(req.requestId, lps as TokenLogprob[]);
    });

    const news = this.scheduler.updateFromOutput(sampled);
    const cachedOf = new Map(so.scheduledRequests.filter((r) => r.isNewlyAdmitted).map((r) => [r.requestId, r.numCachedTokens]));
    const finished = new Map<FinishReason, string[]>([['stop', []], ['length', []]]);
    for (const n of news) {
      const req = this.scheduler.getRequest(n.requestId) as EngineReq;
      this.numGenerationTokens += n.newTokenIds.length;
      const out: EngineOutput = { requestId: n.requestId, newTokenIds: n.newTokenIds, finished: false };
      const lp = logprobsOf.get(n.requestId);
      if (lp) out.logprobs = lp;
      const cached = cachedOf.get(n.requestId);
      if (cached !== undefined && req.numSampledOutputTokens === 1) out.numCachedTokens = cached;
      if (req.sampling!.params.promptLogprobs !== null && req.numSampledOutputTokens === 1) {
        out.promptLogprobs = [null, ...(this.promptLogprobsOf.get(req) ?? [])];
        this.promptLogprobsOf.delete(req);
      }
      const stop = checkStop({
        sampling: req.sampling!.params, numPromptTokens: req.numPromptTokens,
        numOutputTokens: req.numSampledOutputTokens, maxModelLen: this.info.maxModelLen,
      }, n.newTokenIds.at(-1)!, this.eosTokenIds);
      if (stop) {
        out.finished = true;
        out.finishReason = stop.reason;
        if (stop.reason === 'stop' && !stop.eos) out.stopTokenId = stop.stopTokenId;
        finished.get(stop.reason)!.push(n.requestId);
      }
      outputs.push(out);
    }
    this.scheduler.finishRequests(finished.get('stop')!, 'FINISHED_STOPPED');
    this.scheduler.finishRequests(finished.get('length')!, 'FINISHED_LENGTH');
    if (this.grammars !== null && this.grammars.numHeld > 0) for (const ids of finished.values()) for (const id of ids) this.grammars.release(id);
    this.stepMs += performance.now() - t0;
    return outputs;
  }

  /**
   * Embedding requests whose prompt the step finished: their outputs (the pooled hidden state, nothing generated),
   * and their pages freed, before the step's sampled tokens are taken (their rows sampled none).
   */
  private finishPooled(pooled: Map<string, Float32Array>): EngineOutput[] {
    const outputs: EngineOutput[] = [];
    for (const [requestId, hidden] of pooled) {
      const params = this.poolingOf.get(requestId);
      const req = this.scheduler.getRequest(requestId);
      this.poolingOf.delete(requestId);
      if (params === undefined || req === undefined) continue;
      outputs.push({ requestId, newTokenIds: [], finished: true, finishReason: 'stop',
        embedding: poolEmbedding(hidden, params), numCachedTokens: Math.max(0, req.numCachedTokens) });
    }
    this.scheduler.finishRequests(outputs.map((o) => o.requestId), 'FINISHED_STOPPED');
    return outputs;
  }

  private errorOutput(requestId: string, error: string): EngineOutput {
    return { requestId, newTokenIds: [], finished: true, finishReason: 'error', error };
  }

  stats(): EngineStats {
    return {
      numRunning: this.scheduler.running.length,
      numRunningPeak: this.numRunningPeak,
      numWaiting: this.scheduler.waiting.length,
      ...this.kv.cacheStats(),
      numTotalBlocks: this.info.numBlocks,
      numPreemptions: this.scheduler.numPreemptions,
      numPromptTokens: this.numPromptTokens,
      numGenerationTokens: this.numGenerationTokens,
      numSteps: this.numSteps,
      numStepsScheduledAhead: this.numStepsScheduledAhead,
      executeMs: this.executeMs,
      hostMs: this.stepMs - this.executeMs,
      minBytesRead: this.minBytesRead,
      numGraphCaptures: this.runner.numGraphCaptures,
      graphCaptureMs: this.runner.graphCaptureMs,
      ...(this.spec ? { specDecoding: this.spec.stats() } : {}),
    };
  }

  /** The decode graphs of every batch-size bucket: the target's, then a speculative head's chained forwards'. */
  captureGraphs(): void {
    this.runner.captureGraphs();
    this.spec?.captureGraphs();
  }

  traceSummary(): string | null { return this.options.schedulerTrace ? this.scheduler.formatTraceSummary() : null; }

  /** Device-to-device copy bandwidth in bytes/s (the roofline's denominator); null on the CPU backend. */
  copyBandwidth(): number | null {
    return this.runner.copyBandwidth();
  }

  /** bf16 GEMM FLOP/s on 8192^3 (the prefill roofline's denominator); null on the CPU backend. */
  gemmPeak(): number | null {
    return this.runner.gemmPeak();
  }

  dispose(): void { void this.close(); }

  /** dispose(), resolved once the other ranks' processes have exited (LLM.close() leaves none behind). */
  async close(): Promise<void> {
    // ends the grammar hosts at once, whatever they are compiling
    void this.grammars?.dispose();
    this.inFlight = [];
    const ranks = this.tp?.shutdown();  // its collective part runs now, before this backend is disposed
    this.spec?.dispose();
    this.model.backend.dispose();
    await ranks;
  }
}

/**
 * Steps a pipeline-parallel engine keeps in flight (QUIRE_PP_MICRO_BATCHES; by default one a stage): 1 without
 * stages, with speculative decoding (a request's proposals are made from its last token, on the host) and in profile
 * mode (a graph's timings are read once per replay), and never more than the device's sampled ids may wait.
 */
export function pipelineMicroBatches(o: Pick<ResolvedEngineOptions, 'pipelineParallelSize' | 'speculativeConfig' | 'profile'>): number {
  const pp = o.pipelineParallelSize;
  if (pp === 1 || o.speculativeConfig !== null || o.profile) return 1;
  const asked = readKnob('QUIRE_PP_MICRO_BATCHES');
  return Math.min(asked === 0 ? pp : asked, TOKEN_READS_IN_FLIGHT - 1);
}
