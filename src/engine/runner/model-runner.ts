// The model runner: the one owner of "run this scheduled batch on the device" (vLLM's GPUModelRunner). It builds
// the flat batch, picks the launch path (a captured decode graph, an eager forward sampled on the device, logits
// to the host Sampler, or prompt logprobs computed where the logits are), captures the graphs at start-up and runs
// the start-up profile step. The engine core hands it scheduled rows and gets back what waits for their tokens.

import type { Backend, DeviceGraphs } from '../../backend/backend.js';
import type { ForwardBatch } from '../../backend/batch.js';
import type { Model } from '../../model/model.js';
import { buildRowSampling, isDeviceSamplable } from '../../sampling/device-sampling.js';
import type { Sampler, SampleOutput } from '../../sampling/sampler.js';
import type { SequenceSamplingState } from '../../sampling/sequence-state.js';
import type { TokenLogprob } from '../../sampling/types.js';
import { isGreedyVerifiable, verifyGreedy } from '../../sampling/greedy-verify.js';
import { buildForwardBatch, numPromptLogitRows, numSampleRows, type ScheduledSeq } from '../batch-builder.js';
import { runDeviceStep, type DeviceResult, type DeviceStep } from './device-steps.js';
import { captureBucketGraphs, graphBucket, largestStep, uniformGraphBatch } from './graph-buckets.js';

/** A scheduled row as the runner needs it. */
export type RunnerRow = ScheduledSeq & { isDecode: boolean; requestId: string;
  /** A hybrid prefix-cache hit: the cached-state slot copied into stateSlot before the forward (ScheduledRequest). */
  restoreStateFrom?: number;
  /** The cached-state slot stateSlot is copied into after the forward (its state at a page end). */
  saveStateTo?: number;
  /** A verify row on a hybrid model: the backup slot stateSlot is copied into before the forward (ScheduledRequest). */
  backupStateTo?: number };

/** A step's sampled tokens and, for embedding requests whose prompt it finished, their final hidden states. */
export type StepOutput = SampleOutput & { pooled?: Map<string, Float32Array> };

/** A launched step: what waits for its output, and whether its tokens stayed on the device (async scheduling). */
export interface LaunchedStep {
  wait: () => StepOutput;
  sampledOnDevice: boolean;
}

/** What the runner asks of the engine about a row's request. */
export interface RowRequests {
  /** The request's prompt and its prompt_logprobs (null: none), for rows that score prompt positions. */
  promptOf(requestId: string): { promptTokenIds: readonly number[]; promptLogprobs: number | null };
  /** Whether the request is an embedding request (its last prompt row's hidden state is pooled). */
  isPooling(requestId: string): boolean;
  /** Whether any request is an embedding request (the cheap test before the rows are looked at). */
  readonly hasPooling: boolean;
}

export interface RunnerOptions {
  maxNumSeqs: number;
  blockSize: number;
  enforceEager: boolean;
  /** The step budget: a verify graph's padded rows must fit the activations sized for it. */
  maxNumBatchedTokens?: number;
  /**
   * Tensor parallelism: hands each step's device work to the other ranks before this rank runs it
   * (device-steps.ts; parallel/tp-leader.ts). Absent on one GPU.
   */
  mirror?: ((step: DeviceStep) => void) | null;
}

export class ModelRunner {
  private readonly backend: Backend;

  constructor(readonly model: Model, private readonly sampler: Sampler, private readonly options: RunnerOptions,
    private readonly eosTokenIds: readonly number[]) {
    this.backend = model.backend;
  }

  /**
   * Launches a step's forward; where it finishes an embedding request's prompt, that row's final hidden state
   * comes to the host too (such steps are never graphed: the row is a prompt's).
   */
  execute(rows: readonly RunnerRow[], states: readonly SequenceSamplingState[], requests: RowRequests): LaunchedStep {
    // the copies are ordered with the forward on the device: a saved state is the one this step leaves
    for (const r of rows) if (r.restoreStateFrom !== undefined) this.run({ op: 'copyState', src: r.restoreStateFrom, dst: r.stateSlot! });
    for (const r of rows) if (r.backupStateTo !== undefined) this.run({ op: 'copyState', src: r.stateSlot!, dst: r.backupStateTo });
    const launched = this.launch(rows, states, requests);
    for (const r of rows) if (r.saveStateTo !== undefined) this.run({ op: 'copyState', src: r.stateSlot!, dst: r.saveStateTo });
    return launched;
  }

  /** Runs a step's device work here, after handing it to the other ranks (tensor parallelism). */
  private run<Op extends DeviceStep['op']>(step: Extract<DeviceStep, { op: Op }>): Extract<DeviceResult, { op: Op }> {
    this.options.mirror?.(step);
    return runDeviceStep(this.model, this.options.enforceEager ? undefined : this.backend.graphs, step) as Extract<DeviceResult, { op: Op }>;
  }

  private launch(rows: readonly RunnerRow[], states: readonly SequenceSamplingState[], requests: RowRequests): LaunchedStep {
    if (!requests.hasPooling) return this.launchForward(rows, states, requests);
    const sampledRows = rows.filter((r) => r.sample);
    const pooledAt = sampledRows.flatMap((r, i) => (!r.isDecode && requests.isPooling(r.requestId) ? [i] : []));
    const launched = this.launchForward(rows, states, requests);
    if (pooledAt.length === 0) return launched;
    const hidden = this.model.hiddenRows(pooledAt);
    const width = this.model.config.hiddenSize;
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
  private launchForward(rows: readonly RunnerRow[], states: readonly SequenceSamplingState[],
    requests: RowRequests): LaunchedStep {
    // rows with proposals (speculative decoding) are verified on the host, from each position's argmax where every
    // row is greedy (verifyGreedily), else from their logits, eagerly
    const drafts = rows.some((r) => (r.specTokenIds?.length ?? 0) > 0)
      ? rows.filter((r) => r.sample).map((r) => r.specTokenIds) : undefined;
    const graphs = this.options.enforceEager ? undefined : this.backend.graphs;
    if (drafts !== undefined && rows.every((r) => numPromptLogitRows(r) === 0) &&
      states.every((st) => isGreedyVerifiable(st, this.eosTokenIds))) return this.verifyGreedily(rows, drafts, graphs);
    const onDevice = drafts === undefined && states.every((st) => isDeviceSamplable(st, this.eosTokenIds)) &&
      rows.every((r) => numPromptLogitRows(r) === 0);
    const bucket = drafts === undefined && rows.every((r) => r.isDecode) ? graphBucket(rows.length, this.options.maxNumSeqs) : null;
    const batch = graphs && bucket !== null ? buildForwardBatch(rows, this.options.blockSize, bucket, true)
      : buildForwardBatch(rows, this.options.blockSize);
    if (drafts !== undefined) batch.verify = true;
    const graphKey = graphs && bucket !== null ? bucket : null;
    if (!onDevice) {
      const scored = rows.some((r) => numPromptLogitRows(r) > 0) ? this.forwardScored(batch, rows, states, requests, drafts) : null;
      if (scored) return { wait: () => scored, sampledOnDevice: false };
      const { logits } = this.run({ op: 'logits', batch, graphKey: graphKey === null ? null : -graphKey });
      const result = this.sampler.sample(logits, states, drafts);
      return { wait: () => result, sampledOnDevice: false };
    }
    batch.sampling = buildRowSampling(states, batch.logitsIndices.length);
    const { wait } = this.run({ op: 'tokens', batch, graphKey });
    return { wait: () => ({ tokenIds: wait(), logprobs: [] }), sampledOnDevice: true };
  }

  /**
   * A verify step of greedy rows: each position's argmax from the device, the proposals checked against them here.
   * Rows all of k proposals replay a graph of their shape (uniformGraphBatch); rows with fewer (max_tokens, the
   * budget) make the step eager, and so does a hybrid model's (its DeltaNet chunk kernels inside a graph of several
   * tokens a row have not run on a GPU yet).
   */
  private verifyGreedily(rows: readonly RunnerRow[], drafts: readonly (readonly number[] | undefined)[],
    graphs: DeviceGraphs | undefined): LaunchedStep {
    const { blockSize, maxNumSeqs, maxNumBatchedTokens } = this.options;
    const graphed = graphs && rows.every((r) => r.stateSlot === undefined)
      ? uniformGraphBatch(rows, blockSize, maxNumSeqs, maxNumBatchedTokens ?? 0) : null;
    const batch = graphed ? graphed.batch : buildForwardBatch(rows, blockSize);
    batch.verify = true;
    const { wait } = this.run({ op: 'tokens', batch, graphKey: graphed ? graphed.key : null });
    const numRows = rows.reduce((a, r) => a + numSampleRows(r), 0);
    return { wait: () => verifyGreedy(wait().subarray(0, numRows), drafts), sampledOnDevice: false };
  }

  /**
   * A step with prompt-logit rows (eager: prompt chunks are never graphed): the backend computes each position's
   * logprob, rank and alternatives where the logits are (Model.forwardScored); only those and the sampled rows'
   * logits reach the host.
   */
  private forwardScored(batch: ForwardBatch, rows: readonly RunnerRow[], states: readonly SequenceSamplingState[],
    requests: RowRequests, drafts: readonly (readonly number[] | undefined)[] | undefined): SampleOutput {
    const wanted = rows.filter((r) => numPromptLogitRows(r) > 0).map((r) => ({ r, req: requests.promptOf(r.requestId) }));
    const numTop = Math.max(...wanted.map(({ req }) => req.promptLogprobs ?? 0));
    const targets = Int32Array.from(wanted.flatMap(({ r, req }) => req.promptTokenIds.slice(r.promptLogitsFrom! + 1, r.promptLogitsTo! + 1)));
    const numSampled = rows.reduce((a, r) => a + numSampleRows(r), 0);
    const out = this.run({ op: 'scored', batch, numSampled, targets, numTop });
    const result = this.sampler.sample(out.logits, states, drafts);
    const ints = out.scored;
    const floats = new Float32Array(ints.buffer, ints.byteOffset, ints.length);
    const width = 2 + 2 * numTop;
    let at = 0;
    result.promptLogprobs = new Map(wanted.map(({ r, req }) => {
      const k = req.promptLogprobs ?? 0;
      const lps: TokenLogprob[] = [];
      for (let p = r.promptLogitsFrom!; p < r.promptLogitsTo!; p++, at += width) {
        lps.push({ tokenId: req.promptTokenIds[p + 1]!, logprob: floats[at]!, rank: ints[at + 1]!,
          top: Array.from({ length: k }, (_, j) => ({ tokenId: ints[at + 2 + 2 * j]!, logprob: floats[at + 3 + 2 * j]! })) });
      }
      return [r.requestId, lps];
    }));
    return result;
  }

  /**
   * Captures the decode graph of every batch-size bucket (sampling on the device) over padding rows, largest
   * first, as vLLM does at start-up, after profileRun sized the step metadata and the activation arenas for the
   * largest step: no step of a run pays for a capture, and no later step grows memory under a captured graph.
   */
  captureGraphs(): void {
    captureDecodeGraphs(this.model, this.options);
  }

  get numGraphCaptures(): number {
    return this.backend.graphs?.numCaptures ?? 0;
  }

  get graphCaptureMs(): number {
    return this.backend.graphs?.captureMs ?? 0;
  }

  /** Device-to-device copy bandwidth in bytes/s (the roofline's denominator); null on the CPU backend. */
  copyBandwidth(): number | null {
    return this.backend.probes?.copyBandwidth() ?? null;
  }

  /** bf16 GEMM FLOP/s on 8192^3 (the prefill roofline's denominator); null on the CPU backend. */
  gemmPeak(): number | null {
    return this.backend.probes?.gemmPeak() ?? null;
  }
}

/** ModelRunner.captureGraphs for `model` (every rank of tensor parallelism captures the same buckets). */
export function captureDecodeGraphs(model: Model, options: RunnerOptions): void {
  const graphs = model.backend.graphs;
  if (!graphs || options.enforceEager) return;
  captureBucketGraphs(graphs, options.maxNumSeqs, options.blockSize, (bucket) => bucket,
    (batch) => model.forwardTokens(batch));
}

/**
 * An MTP head's carry (both backends), then on CUDA, as vLLM's profile run: the largest step once, on a KV cache of
 * one page (the null page its rows write), before the KV cache is sized, so the cache gets what the activations leave
 * (a 16,384-token step of an 8b model takes several GiB); with an MTP head, its catch-up after that step too. With
 * graphs the step metadata is reserved for that step too, so it never grows later.
 */
export function profileRun(model: Model, options: RunnerOptions & { maxNumBatchedTokens: number },
  maxModelLen: number): void {
  const { maxNumSeqs, blockSize, maxNumBatchedTokens } = options;
  // an MTP head reads each step's final hidden states: room for the largest step's (graph padding included)
  if (model.hasMtp) model.allocateMtpCarry(Math.max(maxNumBatchedTokens, maxNumSeqs));
  // an EAGLE-3 head reads three of its layers' inputs likewise
  if (model.hasEagle3) model.allocateEagle3Carry(Math.max(maxNumBatchedTokens, maxNumSeqs));
  const probes = model.backend.probes;
  if (!probes) return;
  model.backend.allocateKvCache(model.kvCacheSpec(1, blockSize));
  // a hybrid model's DeltaNet layers need their states allocated; the step's rows have no slot (zeros, nothing kept)
  const states = model.recurrentStateLayout(1);
  if (states !== null) model.backend.allocateRecurrentState(states);
  if (!options.enforceEager) {
    probes.reserveStepCapacity(Math.max(maxNumBatchedTokens, maxNumSeqs), maxNumSeqs, Math.ceil(maxModelLen / blockSize));
  }
  const largest = buildForwardBatch(largestStep(maxNumBatchedTokens, maxNumSeqs, maxModelLen, blockSize), blockSize);
  model.forwardTokens(largest);
  // an MTP head's catch-up after such a step: its tokens, on the rows that step kept (mtp-proposer.ts)
  const carryRows = Int32Array.from({ length: largest.numTokens }, (_, t) => t);
  if (model.hasMtp) model.mtpTokens({ ...largest, carryRows });
  if (model.hasEagle3) model.eagle3Tokens({ ...largest, carryRows }, 'target');
  probes.settleWorkspace();
}
