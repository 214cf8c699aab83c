// Prometheus metrics, named as vLLM's with a `quire:` prefix (and, by default, once more under vLLM's own `vllm:`
// names with its `model_name` label, so that a dashboard made for vLLM works unchanged), in a registry of
// the server's own. Engine gauges and engine counters are read from
// engine.stats() at scrape time; request counters and latency histograms are
// observed here as requests are served.
//
// A data-parallel engine (--data-parallel-size N > 1) adds, to each engine gauge and counter, one series per
// replica labelled as vLLM labels them, engine="0" to engine="N-1" (engine.replicaStats()); the unlabelled series
// stays the total over the replicas, as with one engine, so what reads it today reads the same. A sum over the
// whole family therefore counts twice: sum the {engine!=""} series, or read the unlabelled one.

import { Counter, Gauge, Histogram, Registry } from 'prom-client';
import type { EngineClient } from '../engine/client.js';
import type { SpecDecodingStats } from '../engine/spec/spec-decode.js';
import type { EngineStats } from '../engine/types.js';

const TTFT_BUCKETS_S = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80];
const ITL_BUCKETS_S = [0.001, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5, 5, 10, 20, 40, 80];
const E2E_BUCKETS_S = [0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, 120, 240, 480, 960];
const ITERATION_TOKEN_BUCKETS = [1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384];
const MAX_STEPS_OBSERVED_AT_ONCE = 256;

/** Which names /metrics exposes (--metrics-names). */
export type MetricsNames = 'quire' | 'vllm' | 'both';
export const METRICS_NAMES: readonly MetricsNames[] = ['quire', 'vllm', 'both'];

/** The exposition's `quire:` samples under vLLM's `vllm:` names, each with vLLM's `model_name` label. */
export function asVllmMetrics(text: string, modelName: string): string {
  const label = `model_name=${JSON.stringify(modelName)}`;
  const out: string[] = [];
  for (const line of text.split('\n')) {
    if (line.startsWith('# HELP quire:') || line.startsWith('# TYPE quire:')) {
      out.push(line.replace(' quire:', ' vllm:'));
    } else if (line.startsWith('quire:')) {
      const m = /^quire:([A-Za-z0-9_:]+)(\{)?/.exec(line)!;
      const rest = line.slice(m[0].length);
      out.push(m[2] ? `vllm:${m[1]}{${label},${rest}` : `vllm:${m[1]}{${label}}${rest}`);
    }
  }
  return out.join('\n') + '\n';
}

export class ApiMetrics {
  readonly registry = new Registry();
  private readonly promptTokens: Counter;
  private readonly generationTokens: Counter;
  private readonly requestSuccess: Counter<'finished_reason'>;
  private readonly ttft: Histogram;
  private readonly itl: Histogram;
  private readonly e2e: Histogram;
  private readonly iterationTokens: Histogram;
  private lastNumSteps: number;
  private lastNumStepTokens: number;
  private specRegistered = false;

  constructor(private readonly engine: EngineClient, private readonly names: MetricsNames = 'both',
    private readonly modelName = '') {
    const registers = [this.registry];
    const stats = () => engine.stats();
    const replicas = () => perReplica(engine);
    engineGauge('quire:num_requests_running', 'Requests in the running batch.', registers, stats, replicas, (s) => s.numRunning);
    engineGauge('quire:num_requests_waiting', 'Requests waiting to be scheduled.', registers, stats, replicas, (s) => s.numWaiting);
    engineGauge('quire:kv_cache_usage_perc', 'KV cache usage (1 = 100%).', registers, stats, replicas, (s) => s.kvCacheUsage);
    engineCounter('quire:prefix_cache_queries_total', 'Prefix cache queries, in tokens.', registers, () => stats().prefixCacheQueries,
      () => replicas()?.map((s) => s.prefixCacheQueries) ?? null);
    engineCounter('quire:prefix_cache_hits_total', 'Prefix cache hits, in tokens.', registers, () => stats().prefixCacheHits,
      () => replicas()?.map((s) => s.prefixCacheHits) ?? null);
    engineCounter('quire:num_preemptions_total', 'Preemptions.', registers, () => stats().numPreemptions,
      () => replicas()?.map((s) => s.numPreemptions) ?? null);
    this.registerSpecDecoding();
    this.promptTokens = new Counter({ name: 'quire:prompt_tokens_total', help: 'Prompt tokens of served requests.', registers });
    this.generationTokens = new Counter({ name: 'quire:generation_tokens_total', help: 'Generated tokens of served requests.', registers });
    this.requestSuccess = new Counter({ name: 'quire:request_success_total', help: 'Finished requests by finish reason.', labelNames: ['finished_reason'], registers });
    this.ttft = new Histogram({ name: 'quire:time_to_first_token_seconds', help: 'Time to first token.', buckets: TTFT_BUCKETS_S, registers });
    this.itl = new Histogram({ name: 'quire:inter_token_latency_seconds', help: 'Time between outputs of one request.', buckets: ITL_BUCKETS_S, registers });
    this.e2e = new Histogram({ name: 'quire:e2e_request_latency_seconds', help: 'Arrival to finish.', buckets: E2E_BUCKETS_S, registers });
    this.iterationTokens = new Histogram({ name: 'quire:iteration_tokens_total', help: 'Tokens per engine step.', buckets: ITERATION_TOKEN_BUCKETS, registers });
    const s = engine.stats();
    this.lastNumSteps = s.numSteps;
    this.lastNumStepTokens = s.numPromptTokens + s.numGenerationTokens;
  }

  observeFirstToken(seconds: number): void {
    this.ttft.observe(seconds);
  }

  observeInterToken(seconds: number): void {
    this.itl.observe(seconds);
  }

  observeFinished(finishReason: string, e2eSeconds: number, numPromptTokens: number, numGenerationTokens: number): void {
    this.requestSuccess.inc({ finished_reason: finishReason });
    this.e2e.observe(e2eSeconds);
    this.promptTokens.inc(numPromptTokens);
    this.generationTokens.inc(numGenerationTokens);
  }

  /** Spreads the tokens of the engine steps since the last call evenly over those steps. */
  observeEngineProgress(): void {
    const s = this.engine.stats();
    const numSteps = s.numSteps - this.lastNumSteps;
    const numTokens = s.numPromptTokens + s.numGenerationTokens - this.lastNumStepTokens;
    if (numSteps <= 0) return;
    this.lastNumSteps = s.numSteps;
    this.lastNumStepTokens += numTokens;
    const perStep = Math.max(0, numTokens) / numSteps;
    for (let i = 0; i < Math.min(numSteps, MAX_STEPS_OBSERVED_AT_ONCE); i++) this.iterationTokens.observe(perStep);
  }

  /**
   * vLLM's speculative-decoding counters, registered (as vLLM's) only when speculation is on: at the first scrape
   * whose stats carry them where the engine was still loading when the server started (a deferred client).
   */
  private registerSpecDecoding(): void {
    const stats = () => this.engine.stats();
    const registers = [this.registry];
    const spec = () => stats().specDecoding;
    const numPositions = spec()?.numAcceptedTokensPerPos.length ?? 0;
    if (this.specRegistered || numPositions === 0) return;
    this.specRegistered = true;
    const perEngine = (read: (s: SpecDecodingStats) => number) => () =>
      perReplica(this.engine)?.map((s) => (s.specDecoding ? read(s.specDecoding) : 0)) ?? null;
    engineCounter('quire:spec_decode_num_drafts_total', 'Verify rows: steps of a request with proposals.', registers,
      () => spec()!.numDrafts, perEngine((s) => s.numDrafts));
    engineCounter('quire:spec_decode_num_draft_tokens_total', 'Proposed tokens.', registers, () => spec()!.numDraftTokens,
      perEngine((s) => s.numDraftTokens));
    engineCounter('quire:spec_decode_num_accepted_tokens_total', 'Accepted proposed tokens.', registers,
      () => spec()!.numAcceptedTokens, perEngine((s) => s.numAcceptedTokens));
    if (spec()!.numDraftFailures !== undefined) {
      engineCounter('quire:spec_decode_num_draft_failures_total', 'Draft-model forwards that failed (their rows '
        + 'proposed their last token instead, verified as any proposal).', registers, () => spec()!.numDraftFailures ?? 0,
      perEngine((s) => s.numDraftFailures ?? 0));
    }
    let last: number[] = new Array<number>(numPositions).fill(0);
    new Counter({ name: 'quire:spec_decode_num_accepted_tokens_per_pos_total', help: 'Accepted proposed tokens by position.',
      labelNames: ['position'], registers,
      collect() {
        const now = spec()!.numAcceptedTokensPerPos;
        now.forEach((v, j) => this.inc({ position: String(j) }, Math.max(0, v - last[j]!)));
        last = now.map((v, j) => Math.max(v, last[j]!));
      } });
  }

  async text(): Promise<string> {
    this.registerSpecDecoding();
    const text = await this.registry.metrics();
    if (this.names === 'quire') return text;
    const vllm = asVllmMetrics(text, this.modelName);
    return this.names === 'vllm' ? vllm : `${text}${text.endsWith('\n') ? '' : '\n'}${vllm}`;
  }

  get contentType(): string {
    return this.registry.contentType;
  }
}

/** A data-parallel engine's per-replica stats (two or more), or null for one engine. */
function perReplica(engine: EngineClient): EngineStats[] | null {
  const all = engine.replicaStats?.() ?? null;
  return all !== null && all.length > 1 ? all : null;
}

/** A gauge of an engine statistic: the total unlabelled, and each replica's under engine="i" when data parallel. */
function engineGauge(name: string, help: string, registers: Registry[], stats: () => EngineStats,
  replicas: () => EngineStats[] | null, read: (s: EngineStats) => number): void {
  new Gauge({
    name, help, registers, labelNames: ['engine'],
    collect() {
      this.set(read(stats()));
      replicas()?.forEach((s, i) => this.set({ engine: String(i) }, read(s)));
    },
  });
}

/**
 * A counter that mirrors a cumulative engine statistic (the total unlabelled; data parallel, each replica's under
 * engine="i" too).
 */
function engineCounter(name: string, help: string, registers: Registry[], read: () => number,
  readReplicas: () => number[] | null = () => null): void {
  let last = 0;
  const lastOf: number[] = [];
  new Counter({
    name, help, registers, labelNames: ['engine'],
    collect() {
      const v = read();
      // inc(0) too: with the engine label declared, the unlabelled series shows only once it has been touched
      this.inc(Math.max(0, v - last));
      last = Math.max(last, v);
      readReplicas()?.forEach((r, i) => {
        const before = lastOf[i] ?? 0;
        this.inc({ engine: String(i) }, Math.max(0, r - before));
        lastOf[i] = Math.max(before, r);
      });
    },
  });
}
