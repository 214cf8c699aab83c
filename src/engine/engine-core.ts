// The engine step: schedule -> execute (one forward over the flat batch) ->
// sample -> update (append tokens, stop checks, free finished) -> outputs.
// The step loop (advance) overlaps them: with async scheduling, step n+1 is
// scheduled and launched before step n's tokens reach the host.

import type { Backend } from '../backend/backend.js';
import { KVCacheManager } from '../kv/kv-cache-manager.js';
import { loadModelDir, type ModelDir } from '../loader/model-dir.js';
import type { ModelConfig } from '../loader/types.js';
import { Model } from '../model/model.js';
import { buildRowSampling, isDeviceSamplable } from '../sampling/device-sampling.js';
import { Sampler, type SampleOutput } from '../sampling/sampler.js';
import type { SequenceSamplingState } from '../sampling/sequence-state.js';
import { checkStop } from '../sampling/stop.js';
import { Request } from '../scheduler/request.js';
import { Scheduler, type SchedulerOutput } from '../scheduler/scheduler.js';
import { buildForwardBatch, numPromptLogitRows, type ScheduledSeq } from './batch-builder.js';
import type { ForwardBatch } from '../model/batch.js';
import { createBackend, sizeKvCache } from './backend-factory.js';
import { grammarVocabFromTokenizerJson, StructuredOutputs, type GrammarVocab, type TokenConstraint } from '../sampling/structured-output.js';
import { readJsonFile } from '../loader/tokenizer.js';
import { join } from 'node:path';
import { resolveEngineOptions, type EngineOptions, type ResolvedEngineOptions } from './options.js';
import type { EngineInfo } from './worker-protocol.js';
import { defaultMaxModelLen, maxModelLenCap } from '../model/rope.js';
import type { EngineOutput, EngineRequest, EngineStats, FinishReason, PoolingParams, TokenLogprob } from './types.js';
import { poolEmbedding } from './pooling.js';

type EngineReq = Request<SequenceSamplingState>;
type GraphRunner = (key: number, batch: ForwardBatch, record: () => Float32Array | Int32Array) => Float32Array | Int32Array;
type GraphLauncher = (key: number, batch: ForwardBatch) => (() => Float32Array | Int32Array) | null;

/** A step launched by beginStep(), for completeStep(). */
export interface PendingStep {
  /** Outputs already known (errors of rejected requests). */
  outputs: EngineOutput[];
  /** sampledOnDevice: its tokens stay where the next step's input ids can name them (async scheduling). */
  work: { so: SchedulerOutput; rows: EngineReq[]; wait: () => StepOutput; sampledOnDevice: boolean } | null;
}

/** A step's sampled tokens and, for embedding requests whose prompt it finished, their final hidden states. */
type StepOutput = SampleOutput & { pooled?: Map<string, Float32Array> };

/** Decode graph buckets: 1, 2, 4, 8, 16, 24, 32, ... (steps of 8) up to maxNumSeqs; null above. */
export function graphBucket(numSeqs: number, maxNumSeqs: number): number | null {
  if (numSeqs > maxNumSeqs) return null;
  const bucket = numSeqs <= 8 ? 2 ** Math.ceil(Math.log2(Math.max(1, numSeqs))) : Math.ceil(numSeqs / 8) * 8;
  return Math.min(bucket, Math.max(maxNumSeqs, numSeqs));
}

export interface EngineCoreParts {
  model: Model;
  backend: Backend;
  numBlocks: number;
  eosTokenIds: number[];
  maxModelLen: number;
  /** The vocabulary for structured outputs (read on first use); absent: such requests fail. */
  grammarVocab?: () => GrammarVocab;
  info: Omit<EngineInfo, 'numBlocks' | 'blockSize' | 'maxModelLen' | 'vocabSize' | 'maxNumBatchedTokens' | 'maxNumSeqs'>;
}

export class EngineCore {
  readonly scheduler: Scheduler;
  readonly kv: KVCacheManager;
  readonly info: EngineInfo;
  private readonly pending: EngineOutput[] = [];
  /** Called when work arrives outside addRequest (a structured output's grammar compiled): the driver's kick. */
  onWork: (() => void) | null = null;
  private readonly structured: StructuredOutputs | null;
  /** Requests whose grammar is compiling (not yet scheduled). */
  private readonly compiling = new Set<string>();
  /** Matchers of scheduled structured-output requests, released when they end. */
  private readonly constraints = new Map<string, TokenConstraint>();
  /** Prompt logprobs made so far of requests that have not had their first token yet. */
  private readonly promptLogprobsOf = new WeakMap<EngineReq, TokenLogprob[]>();
  /** Embedding requests not yet finished, with how their hidden state is pooled. */
  private readonly poolingOf = new Map<string, PoolingParams>();
  /** The step advance() launched last and has not completed. */
  private inFlight: PendingStep | null = null;
  private readonly model: Model;
  private readonly config: ModelConfig;
  private readonly eosTokenIds: readonly number[];
  private readonly sampler: Sampler;
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
    this.structured = parts.grammarVocab ? new StructuredOutputs(parts.grammarVocab) : null;
    this.kv = new KVCacheManager({
      numBlocks: parts.numBlocks, blockSize: options.blockSize, enablePrefixCaching: options.enablePrefixCaching,
    });
    this.scheduler = new Scheduler({
      maxNumBatchedTokens: options.maxNumBatchedTokens,
      maxNumSeqs: options.maxNumSeqs,
      blockSize: options.blockSize,
      policy: options.schedulingPolicy,
      stepPolicy: options.stepPolicy,
      enableChunkedPrefill: options.enableChunkedPrefill,
      longPrefillTokenThreshold: options.longPrefillTokenThreshold,
      trace: options.schedulerTrace,
    }, this.kv);
    this.info = {
      ...parts.info, numBlocks: parts.numBlocks, blockSize: options.blockSize,
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
    if (this.structured === null) {
      this.pending.push(this.errorOutput(r.requestId, 'structured outputs need the model\'s tokenizer.json'));
      return;
    }
    // The grammar compiles off the step loop (vLLM's requests wait for theirs too); the request joins when it is ready.
    this.compiling.add(r.requestId);
    this.structured.constraintFor(spec).then((c) => {
      if (!this.compiling.delete(r.requestId)) return c.dispose();
      this.schedule(r, c);
      this.onWork?.();
    }, (e: unknown) => {
      if (!this.compiling.delete(r.requestId)) return;
      this.pending.push(this.errorOutput(r.requestId, `the structured output does not compile: ${(e as Error).message ?? e}`));
      this.onWork?.();
    });
  }

  private schedule(r: EngineRequest, constraint: TokenConstraint | null): void {
    if (r.pooling) this.poolingOf.set(r.requestId, r.pooling);
    const sampler = this.sampler.newSequenceState(r.sampling, r.promptTokenIds);
    if (constraint !== null) {
      sampler.constraint = constraint;
      this.constraints.set(r.requestId, constraint);
    }
    this.scheduler.addRequest(new Request<SequenceSamplingState>({
      requestId: r.requestId, promptTokenIds: r.promptTokenIds, maxTokens: r.sampling.maxTokens,
      priority: r.priority, arrivalTime: r.arrivalTime, cacheSalt: r.cacheSalt, sampling: sampler,
      promptLogits: r.sampling.promptLogprobs !== null,
    }));
  }

  /** Frees a finished request's grammar matcher. */
  private releaseConstraint(requestId: string): void {
    const c = this.constraints.get(requestId);
    if (c === undefined) return;
    this.constraints.delete(requestId);
    c.dispose();
  }

  /** Structured-output matchers held (tests: none leak). */
  get numConstraints(): number {
    return this.constraints.size + this.compiling.size;
  }

  /** Frees the request's pages at once; returns its final output. */
  abortRequest(requestId: string): EngineOutput[] {
    if (this.compiling.delete(requestId)) return [{ requestId, newTokenIds: [], finished: true, finishReason: 'abort' }];
    if (!this.scheduler.getRequest(requestId)) return [];
    this.scheduler.abortRequest(requestId);
    this.poolingOf.delete(requestId);
    this.releaseConstraint(requestId);
    return [{ requestId, newTokenIds: [], finished: true, finishReason: 'abort' }];
  }

  hasWork(): boolean {
    return this.inFlight !== null || this.pending.length > 0 || this.scheduler.hasUnfinishedRequests();
  }

  /** One step, launched and completed (after any step advance() left in flight). */
  step(): EngineOutput[] {
    const done = this.drain();
    return done.concat(this.completeStep(this.beginStep()));
  }

  /** Completes the step advance() left in flight, if any. */
  drain(): EngineOutput[] {
    const prev = this.inFlight;
    this.inFlight = null;
    return prev ? this.completeStep(prev) : [];
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
    const prev = this.inFlight;
    this.inFlight = null;
    let outputs: EngineOutput[] = [];
    const ahead = prev !== null && this.canScheduleAhead(prev);
    if (prev && !ahead) outputs = this.completeStep(prev);
    const next = this.pending.length > 0 || this.scheduler.hasUnfinishedRequests() ? this.beginStep() : null;
    if (prev && ahead) {
      if (next?.work) this.numStepsScheduledAhead++;
      outputs = this.completeStep(prev);
    }
    if (next?.work) this.inFlight = next;
    else if (next) outputs = outputs.concat(next.outputs);
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
    const outputs = this.pending.splice(0);
    if (!this.scheduler.hasUnfinishedRequests()) return { outputs, work: null };
    const t0 = performance.now();
    try {
      const so = this.scheduler.schedule();
      if (so.scheduledRequests.length === 0) return { outputs, work: null };
      this.numSteps++;
      this.numRunningPeak = Math.max(this.numRunningPeak, this.scheduler.running.length);
      const rows: EngineReq[] = [];
      let numKvTokensRead = 0;
      for (const r of so.scheduledRequests) {
        numKvTokensRead += r.seqLen;
        if (!r.isDecode) this.numPromptTokens += r.numScheduledTokens;
        if (r.sample) rows.push(this.scheduler.getRequest(r.requestId) as EngineReq);
      }
      this.minBytesRead += this.info.weightBytesPerStep + numKvTokensRead * this.model.kvBytesPerToken();
      const states = rows.map((r) => r.sampling!);
      const te = performance.now();
      const { wait, sampledOnDevice } = this.launch(so.scheduledRequests, states);
      this.executeMs += performance.now() - te;
      return { outputs, work: { so, rows, wait, sampledOnDevice } };
    } finally {
      this.stepMs += performance.now() - t0;
    }
  }

  completeStep(step: PendingStep): EngineOutput[] {
    const { outputs, work } = step;
    if (!work) return outputs;
    const t0 = performance.now();
    const { so, rows } = work;
    const { tokenIds, logprobs, promptLogprobs, pooled } = work.wait();
    this.executeMs += performance.now() - t0;
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
    rows.forEach((req, i) => {
      if (pooled?.has(req.requestId)) return;
      sampled.set(req.requestId, [tokenIds[i]!]);
      req.sampling!.appendOutputTokens([tokenIds[i]!]);
      const lp = logprobs[i];
      if (lp) logprobsOf.set(req.requestId, [lp]);
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
    if (this.constraints.size > 0) for (const ids of finished.values()) for (const id of ids) this.releaseConstraint(id);
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

  /**
   * Launches a step's forward; where it finishes an embedding request's prompt, that row's final hidden state
   * comes to the host too (such steps are never graphed: the row is a prompt's).
   */
  private launch(rows: readonly (ScheduledSeq & { isDecode: boolean; requestId: string })[],
    states: readonly SequenceSamplingState[]): { wait: () => StepOutput; sampledOnDevice: boolean } {
    if (this.poolingOf.size === 0) return this.launchForward(rows, states);
    const sampledRows = rows.filter((r) => r.sample);
    const pooledAt = sampledRows.flatMap((r, i) => (!r.isDecode && this.poolingOf.has(r.requestId) ? [i] : []));
    const launched = this.launchForward(rows, states);
    if (pooledAt.length === 0) return launched;
    const hidden = this.model.hiddenRows(pooledAt);
    const width = this.config.hiddenSize;
    const pooled = new Map(pooledAt.map((at, i) => [sampledRows[at]!.requestId, hidden.subarray(i * width, (i + 1) * width)]));
    // an embedding request ends with this step: none is planned past it before it completes (not sampled on device)
    return { wait: () => ({ ...launched.wait(), pooled }), sampledOnDevice: false };
  }

  /**
   * Launches one forward and returns what waits for its tokens. Rows the backend
   * can sample (states all device-samplable) get only token ids back; otherwise
   * the full logits come to the host and the Sampler picks (at once). Decode-only
   * steps replay a CUDA graph captured per batch-size bucket and mode, without
   * waiting for it when one is ready.
   */
  private launchForward(rows: readonly (ScheduledSeq & { isDecode: boolean; requestId: string })[],
    states: readonly SequenceSamplingState[]): { wait: () => SampleOutput; sampledOnDevice: boolean } {
    const onDevice = states.every((st) => isDeviceSamplable(st, this.eosTokenIds)) &&
      rows.every((r) => numPromptLogitRows(r) === 0);
    const backend = this.model.backend as Backend & { graph?: GraphRunner; graphLaunch?: GraphLauncher };
    const bucket = rows.every((r) => r.isDecode) ? graphBucket(rows.length, this.options.maxNumSeqs) : null;
    const useGraph = backend.graph !== undefined && !this.options.enforceEager && bucket !== null;
    const batch = useGraph ? buildForwardBatch(rows, this.options.blockSize, bucket, true)
      : buildForwardBatch(rows, this.options.blockSize);
    if (!onDevice) {
      const scored = rows.some((r) => numPromptLogitRows(r) > 0) ? this.forwardScored(batch, rows, states) : null;
      if (scored) return { wait: () => scored, sampledOnDevice: false };
      const logits = useGraph ? backend.graph!(-bucket!, batch, () => this.model.forward(batch)) as Float32Array
        : this.model.forward(batch);
      const result = this.sampler.sample(logits, states);
      return { wait: () => result, sampledOnDevice: false };
    }
    batch.sampling = buildRowSampling(states, batch.logitsIndices.length);
    const waitTokens = useGraph ? backend.graphLaunch?.(bucket!, batch) : null;
    if (waitTokens) return { wait: () => ({ tokenIds: waitTokens() as Int32Array, logprobs: [] }), sampledOnDevice: true };
    if (!useGraph) {
      const waitIds = this.model.forwardTokensAsync(batch);
      return { wait: () => ({ tokenIds: waitIds(), logprobs: [] }), sampledOnDevice: true };
    }
    const tokenIds = backend.graph!(bucket!, batch, () => this.model.forwardTokens(batch)) as Int32Array;
    return { wait: () => ({ tokenIds, logprobs: [] }), sampledOnDevice: true };
  }

  /**
   * A step with prompt-logit rows (eager: prompt chunks are never graphed): the backend computes each position's
   * logprob, rank and alternatives where the logits are (Model.forwardScored); only those and the sampled rows'
   * logits reach the host.
   */
  private forwardScored(batch: ForwardBatch, rows: readonly (ScheduledSeq & { requestId: string })[],
    states: readonly SequenceSamplingState[]): SampleOutput {
    const wanted = rows.filter((r) => numPromptLogitRows(r) > 0).map((r) => ({ r, req: this.scheduler.getRequest(r.requestId) as EngineReq }));
    const numTop = Math.max(...wanted.map(({ req }) => req.sampling!.params.promptLogprobs ?? 0));
    const targets = Int32Array.from(wanted.flatMap(({ r, req }) => req.promptTokenIds.slice(r.promptLogitsFrom! + 1, r.promptLogitsTo! + 1)));
    const out = this.model.forwardScored(batch, states.length, targets, numTop);
    const result = this.sampler.sample(out.logits, states);
    const ints = out.scored;
    const floats = new Float32Array(ints.buffer, ints.byteOffset, ints.length);
    const width = 2 + 2 * numTop;
    let at = 0;
    result.promptLogprobs = new Map(wanted.map(({ r, req }) => {
      const k = req.sampling!.params.promptLogprobs ?? 0;
      const lps: TokenLogprob[] = [];
      for (let p = r.promptLogitsFrom!; p < r.promptLogitsTo!; p++, at += width) {
        lps.push({ tokenId: req.promptTokenIds[p + 1]!, logprob: floats[at]!, rank: ints[at + 1]!,
          top: Array.from({ length: k }, (_, j) => ({ tokenId: ints[at + 2 + 2 * j]!, logprob: floats[at + 3 + 2 * j]! })) });
      }
      return [req.requestId, lps];
    }));
    return result;
  }

  private errorOutput(requestId: string, error: string): EngineOutput {
    return { requestId, newTokenIds: [], finished: true, finishReason: 'error', error };
  }

  stats(): EngineStats {
    const numTotalBlocks = this.info.numBlocks;
    return {
      numRunning: this.scheduler.running.length,
      numRunningPeak: this.numRunningPeak,
      numWaiting: this.scheduler.waiting.length,
      kvCacheUsage: this.kv.usage(),
      numFreeBlocks: this.kv.numFreeBlocks,
      numTotalBlocks,
      prefixCacheQueries: this.kv.prefixCacheQueries,
      prefixCacheHits: this.kv.prefixCacheHits,
      numPreemptions: this.scheduler.numPreemptions,
      numPromptTokens: this.numPromptTokens,
      numGenerationTokens: this.numGenerationTokens,
      numSteps: this.numSteps,
      numStepsScheduledAhead: this.numStepsScheduledAhead,
      executeMs: this.executeMs,
      hostMs: this.stepMs - this.executeMs,
      minBytesRead: this.minBytesRead,
      numGraphCaptures: (this.model.backend as { numGraphCaptures?: number }).numGraphCaptures ?? 0,
      graphCaptureMs: (this.model.backend as { graphCaptureMs?: number }).graphCaptureMs ?? 0,
    };
  }

  traceSummary(): string | null {
    return this.options.schedulerTrace ? this.scheduler.formatTraceSummary() : null;
  }

  /**
   * CUDA: captures the decode graph of every batch-size bucket (sampling on the device) over padding rows,
   * largest first, as vLLM does at start-up, after profileActivations sized the step metadata and the activation
   * arenas for the largest step: no step of a run pays for a capture, and no later step grows memory under a
   * captured graph.
   */
  captureGraphs(): void {
    const backend = this.model.backend as Backend & { graph?: GraphRunner };
    if (!backend.graph || this.options.enforceEager) return;
    for (const bucket of graphBuckets(this.options.maxNumSeqs).reverse()) {
      const batch = buildForwardBatch([], this.options.blockSize, bucket, true);
      backend.graph(bucket, batch, () => this.model.forwardTokens(batch));
    }
  }

  /** Device-to-device copy bandwidth in bytes/s (the roofline's denominator); null on the CPU backend. */
  copyBandwidth(): number | null {
    const backend = this.model.backend as Backend & { copyBandwidth?: () => number };
    return backend.copyBandwidth ? backend.copyBandwidth() : null;
  }

  /** bf16 GEMM FLOP/s on 8192^3 (the prefill roofline's denominator); null on the CPU backend. */
  gemmPeak(): number | null {
    const backend = this.model.backend as Backend & { gemmPeak?: () => number };
    return backend.gemmPeak ? backend.gemmPeak() : null;
  }

  dispose(): void {
    for (const id of [...this.constraints.keys()]) this.releaseConstraint(id);
    this.compiling.clear();
    this.inFlight = null;
    this.model.backend.dispose();
  }
}

/**
 * The step that needs the most activation memory: the whole token budget in
 * maxNumSeqs sequences (one-token rows plus prompts of at most maxModelLen), each
 * sampled, written to the null page (block 0). Run once before graphs are captured.
 */
export function largestStep(maxNumBatchedTokens: number, maxNumSeqs: number, maxModelLen: number,
  blockSize: number): ScheduledSeq[] {
  const seq = (n: number): ScheduledSeq => ({ tokenIds: new Array<number>(n).fill(0), startPosition: 0,
    blockTable: new Array<number>(Math.ceil(n / blockSize)).fill(0), sample: true });
  const numSeqs = Math.min(maxNumSeqs, maxNumBatchedTokens);
  let numLong = 1;
  while (numLong < numSeqs && maxNumBatchedTokens - (numSeqs - numLong) > numLong * maxModelLen) numLong++;
  const out: ScheduledSeq[] = [];
  let left = Math.min(maxNumBatchedTokens - (numSeqs - numLong), numLong * maxModelLen);
  for (let i = 0; i < numLong; i++) {
    const n = Math.min(maxModelLen, Math.ceil(left / (numLong - i)));
    out.push(seq(n));
    left -= n;
  }
  while (out.length < numSeqs) out.push(seq(1));
  return out;
}

/**
 * CUDA, as vLLM's profile run: the largest step once, on a KV cache of one page (the null page its rows write),
 * before the KV cache is sized, so the cache gets what the activations leave (a 16,384-token step of an 8b model
 * takes several GiB). With graphs the step metadata is reserved for that step too, so it never grows later.
 */
export function profileActivations(model: Model, options: ResolvedEngineOptions, maxModelLen: number): void {
  const backend = model.backend as Backend & { settleWorkspace?: () => void;
    reserveStepCapacity?: (numTokens: number, numSeqs: number, maxBlocksPerSeq: number) => void };
  if (!backend.reserveStepCapacity || !backend.settleWorkspace) return;
  const { maxNumBatchedTokens, maxNumSeqs, blockSize } = options;
  backend.allocateKvCache(model.kvCacheSpec(1, blockSize));
  if (!options.enforceEager) {
    backend.reserveStepCapacity(Math.max(maxNumBatchedTokens, maxNumSeqs), maxNumSeqs, Math.ceil(maxModelLen / blockSize));
  }
  model.forwardTokens(buildForwardBatch(largestStep(maxNumBatchedTokens, maxNumSeqs, maxModelLen, blockSize), blockSize));
  backend.settleWorkspace();
}

/** Every decode graph bucket up to maxNumSeqs, ascending. */
export function graphBuckets(maxNumSeqs: number): number[] {
  const out = new Set<number>();
  for (let n = 1; n <= maxNumSeqs; n++) out.add(graphBucket(n, maxNumSeqs)!);
  return [...out];
}

/** Why the engine cannot serve contexts of maxModelLen tokens for this model and options, or null. */
export function maxModelLenRefusal(config: ModelConfig, maxModelLen: number,
  options: Pick<ResolvedEngineOptions, 'enableChunkedPrefill' | 'maxNumBatchedTokens'>,
  allowLong = process.env.QUIRE_ALLOW_LONG_MAX_MODEL_LEN === '1'): string | null {
  if (maxModelLen > maxModelLenCap(config)) {
    return `max_model_len (${maxModelLen}) is longer than the model's sliding window (${config.slidingWindow} tokens): `
      + `Quire computes full attention, which is the model's only within the window; pass --max-model-len ${config.slidingWindow} or less`;
  }
  const derived = defaultMaxModelLen(config);
  if (maxModelLen > derived && !allowLong) {
    return `max_model_len (${maxModelLen}) is longer than the model's context (${derived}: max_position_embeddings `
      + 'and its RoPE scaling), past which it was never trained; as vLLM, QUIRE_ALLOW_LONG_MAX_MODEL_LEN=1 allows it';
  }
  if (!options.enableChunkedPrefill && options.maxNumBatchedTokens < maxModelLen) {
    return `max_num_batched_tokens (${options.maxNumBatchedTokens}) is smaller than max_model_len (${maxModelLen}): `
      + 'with chunked prefill off a prompt must fit one step; raise --max-num-batched-tokens or lower --max-model-len';
  }
  return null;
}

/** Loads the model directory, picks and sizes the backend, and builds the engine core. */
export async function createEngineCore(given: EngineOptions, loaded?: ModelDir): Promise<EngineCore> {
  const t0 = performance.now();
  const dir = loaded ?? loadModelDir(given.model, given);
  const { backend, device } = await createBackend(given);
  const options = resolveEngineOptions(given, { backend: backend.name, name: device, totalBytes: backend.memory().totalBytes });
  const model = Model.load(dir.config, dir.weights, backend, { quantization: options.quantization });
  const maxModelLen = options.maxModelLen ?? defaultMaxModelLen(dir.config);
  const refusal = maxModelLenRefusal(dir.config, maxModelLen, options);
  if (refusal) {
    backend.dispose();
    throw new Error(refusal);
  }
  profileActivations(model, options, maxModelLen);
  const numBlocks = sizeKvCache(model, backend, options, maxModelLen);
  const core = new EngineCore({
    model, backend, numBlocks, maxModelLen, eosTokenIds: dir.generation.eosTokenIds,
    grammarVocab: () => grammarVocabFromTokenizerJson(readJsonFile(join(dir.tokenizerDir, 'tokenizer.json')) as Record<string, unknown>,
      dir.config.vocabSize, dir.generation.eosTokenIds),
    info: { backend: backend.name, device, loadMs: 0, weightBytesPerStep: model.weightBytesPerStep() },
  }, options);
  core.captureGraphs();
  core.info.loadMs = Math.round(performance.now() - t0);
  return core;
}
