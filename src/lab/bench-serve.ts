// Serving benchmark over one or more OpenAI-compatible targets, same session,
// interleaved: for each level, rounds alternate targets (A, B, A, B ...), and
// every target is reported as a ratio to the first with its spread over rounds.

import { createRequire } from 'node:module';
import { performance } from 'node:perf_hooks';
import { streamCompletion, type CompletionRequest, type RequestResult } from './client.js';
import { percentile, ratioAcrossRounds, tpotMs, type RatioSpread } from './stats.js';
import { applyNonce, arrivalGapsMs, freshNonce, seededRng, type LevelSpec, type Workload } from './workloads.js';
import { specDelta, type SpecCounts } from './spec-scrape.js';

export interface BenchTarget {
  name: string;
  url: string;
  model: string;
  extraBody?: Record<string, unknown>;
  headers?: Record<string, string>;
}

export interface BenchServeOptions {
  targets: BenchTarget[];
  workload: Workload;
  /** Rounds per level; each round runs every target once. */
  numRounds?: number;
  /** Requests sent to each target (all at once, 8 tokens each) before its first level. */
  numWarmupRequests?: number;
  vocabSize?: number;
  timeoutMs?: number;
  /** Progress bar on stderr; defaults to whether stderr is a TTY. */
  progress?: boolean;
  seed?: number;
  onRun?: (run: LevelRun) => void;
  /** Sends one request; defaults to streamCompletion (tests may wrap it). */
  send?: (req: CompletionRequest) => Promise<RequestResult>;
  /** Reads a target's speculative-decoding counters (spec-scrape.ts) before and after each run; absent: not read. */
  scrapeSpec?: (target: BenchTarget) => Promise<SpecCounts | null>;
}

export interface LevelMetrics {
  numRequests: number;
  numErrors: number;
  /** The first few distinct error messages. */
  errors: string[];
  ttftMs: { p50: number; p90: number; p99: number };
  tpotMs: { p50: number; p90: number; p99: number };
  itlMs: { p50: number; p99: number };
  e2eMs: { p50: number; p99: number };
  wallS: number;
  /** From first send to the last first token: the window prompt tokens/s is taken over. */
  prefillWindowS: number;
  numOutputTokens: number;
  numPromptTokens: number;
  /** True when every successful request's prompt count came from the server's usage. */
  promptTokensReported: boolean;
  /** Prompt tokens the server served from its prefix cache; null unless every request reported it. */
  numCachedPromptTokens: number | null;
  outputTokensPerS: number;
  promptTokensPerS: number;
  /** 1000 / TPOT p50. */
  perSeqDecodeTokensPerS: number;
  /** The server's speculative-decoding counters over the runs (their /metrics); null unless every run had them. */
  specDecoding: SpecCounts | null;
}

export interface LevelRun {
  level: string;
  target: string;
  round: number;
  metrics: LevelMetrics;
}

export interface LevelSummary {
  level: string;
  concurrency: number | null;
  requestRatePerS: number | null;
  target: string;
  /** Percentiles over every request of every round; rates over the summed windows. */
  metrics: LevelMetrics;
}

export const RATIO_METRICS = [
  'outputTokensPerS',
  'promptTokensPerS',
  'perSeqDecodeTokensPerS',
  'ttftP50Ms',
  'tpotP50Ms',
  'e2eP50Ms',
] as const;
export type RatioMetric = (typeof RATIO_METRICS)[number];

/** target / baseline for each metric, per round; > 1 is faster for rates and slower for latencies. */
export interface LevelRatio {
  level: string;
  baseline: string;
  target: string;
  metrics: Record<RatioMetric, RatioSpread>;
}

export interface BenchServeResult {
  workload: {
    name: string; description: string; promptFormat: string;
    levels: { name: string; concurrency: number | null; requestRatePerS: number | null; burstiness?: number; numRequests: number }[];
  };
  targets: { name: string; url: string; model: string }[];
  numRounds: number;
  startedAt: string;
  finishedAt: string;
  runs: LevelRun[];
  summaries: LevelSummary[];
  ratios: LevelRatio[];
}

interface TimedResults {
  results: RequestResult[];
  approxPromptTokens: number[];
  startMs: number;
  endMs: number;
  /** The server's speculative-decoding counters over the run, where it exposes them. */
  spec?: SpecCounts | null;
}

export function levelMetrics(runs: TimedResults[]): LevelMetrics {
  const ok: RequestResult[] = [];
  const errors = new Set<string>();
  let numRequests = 0;
  let numPromptTokens = 0;
  let promptTokensReported = true;
  let numCachedPromptTokens: number | null = 0;
  let wallS = 0;
  let prefillWindowS = 0;
  for (const run of runs) {
    numRequests += run.results.length;
    let lastFirstTokenMs = run.startMs;
    run.results.forEach((r, i) => {
      if (!r.ok) {
        if (errors.size < 5) errors.add(r.error ?? 'unknown error');
        return;
      }
      ok.push(r);
      if (r.promptTokens === null) promptTokensReported = false;
      numCachedPromptTokens = r.cachedPromptTokens === null || numCachedPromptTokens === null ? null : numCachedPromptTokens + r.cachedPromptTokens;
      numPromptTokens += r.promptTokens ?? run.approxPromptTokens[i]!;
      lastFirstTokenMs = Math.max(lastFirstTokenMs, r.sentAtMs + r.ttftMs);
    });
    wallS += (run.endMs - run.startMs) / 1000;
    prefillWindowS += (lastFirstTokenMs - run.startMs) / 1000;
  }
  const ttft = ok.map((r) => r.ttftMs);
  const tpot = ok.map((r) => tpotMs(r.e2eMs, r.ttftMs, r.outputTokens)).filter((t): t is number => t !== null);
  const itl = ok.flatMap((r) => r.itlMs);
  const e2e = ok.map((r) => r.e2eMs);
  const numOutputTokens = ok.reduce((s, r) => s + r.outputTokens, 0);
  const tpotP50 = percentile(tpot, 50);
  const specDecoding = runs.length > 0 && runs.every((r) => r.spec) ? runs.reduce<SpecCounts>((a, r) => ({
    numDrafts: a.numDrafts + r.spec!.numDrafts, numDraftTokens: a.numDraftTokens + r.spec!.numDraftTokens,
    numAcceptedTokens: a.numAcceptedTokens + r.spec!.numAcceptedTokens }), { numDrafts: 0, numDraftTokens: 0, numAcceptedTokens: 0 }) : null;
  return {
    numRequests,
    numErrors: numRequests - ok.length,
    errors: [...errors],
    ttftMs: { p50: percentile(ttft, 50), p90: percentile(ttft, 90), p99: percentile(ttft, 99) },
    tpotMs: { p50: tpotP50, p90: percentile(tpot, 90), p99: percentile(tpot, 99) },
    itlMs: { p50: percentile(itl, 50), p99: percentile(itl, 99) },
    e2eMs: { p50: percentile(e2e, 50), p99: percentile(e2e, 99) },
    wallS,
    prefillWindowS,
    numOutputTokens,
    numPromptTokens,
    promptTokensReported,
    numCachedPromptTokens: ok.length ? numCachedPromptTokens : null,
    outputTokensPerS: numOutputTokens / wallS,
    promptTokensPerS: prefillWindowS > 0 ? numPromptTokens / prefillWindowS : NaN,
    perSeqDecodeTokensPerS: 1000 / tpotP50,
    specDecoding,
  };
}

function ratioValue(m: LevelMetrics, metric: RatioMetric): number {
  switch (metric) {
    case 'ttftP50Ms':
      return m.ttftMs.p50;
    case 'tpotP50Ms':
      return m.tpotMs.p50;
    case 'e2eP50Ms':
      return m.e2eMs.p50;
    default:
      return m[metric];
  }
}

export function levelRatios(runs: LevelRun[], targetNames: string[]): LevelRatio[] {
  const ratios: LevelRatio[] = [];
  const [baseline, ...others] = targetNames;
  if (baseline === undefined) return ratios;
  const levels = [...new Set(runs.map((r) => r.level))];
  for (const level of levels) {
    const series = (target: string) =>
      runs.filter((r) => r.level === level && r.target === target).sort((a, b) => a.round - b.round);
    const base = series(baseline);
    for (const target of others) {
      const cand = series(target);
      const metrics = Object.fromEntries(
        RATIO_METRICS.map((metric) => [
          metric,
          ratioAcrossRounds(
            base.map((r) => ratioValue(r.metrics, metric)),
            cand.map((r) => ratioValue(r.metrics, metric)),
          ),
        ]),
      ) as Record<RatioMetric, RatioSpread>;
      ratios.push({ level, baseline, target, metrics });
    }
  }
  return ratios;
}

interface ProgressBar {
  start(total: number, value: number, payload?: object): void;
  increment(delta?: number, payload?: object): void;
  stop(): void;
}

function makeProgressBar(enabled: boolean): ProgressBar | null {
  if (!enabled) return null;
  const cliProgress = createRequire(import.meta.url)('cli-progress') as {
    SingleBar: new (opts: object, preset: object) => ProgressBar;
    Presets: { shades_classic: object };
  };
  return new cliProgress.SingleBar(
    { format: '{bar} {value}/{total} requests | {level} {target} round {round} | {duration_formatted}, ETA {eta_formatted}',
      stream: process.stderr, hideCursor: true, etaBuffer: 50 },
    cliProgress.Presets.shades_classic,
  );
}

function failedResult(e: unknown): RequestResult {
  const nowMs = performance.now();
  const error = e instanceof Error ? e.message : String(e);
  return { ok: false, sentAtMs: nowMs, ttftMs: NaN, itlMs: [], e2eMs: 0, outputTokens: 0, promptTokens: null, cachedPromptTokens: null, tokenIds: null, text: '', finishReason: null, error };
}

async function runLevel(
  target: BenchTarget,
  level: LevelSpec,
  opts: BenchServeOptions,
  rng: () => number,
  onDone: () => void,
): Promise<TimedResults> {
  const send = opts.send ?? streamCompletion;
  const vocabSize = opts.vocabSize ?? 32000;
  const levelNonce = level.nonce === 'per-level' ? freshNonce(vocabSize) : null;
  const maxInFlight = level.concurrency ?? Number.POSITIVE_INFINITY;
  const gapsMs = level.requestRatePerS !== null
    ? arrivalGapsMs(level.requests.length, level.requestRatePerS, rng, level.burstiness ?? 1) : null;
  const results: RequestResult[] = new Array(level.requests.length);
  const waiters: (() => void)[] = [];
  let numInFlight = 0;
  const inFlight: Promise<void>[] = [];
  const startMs = performance.now();
  let nextSendMs = startMs;
  for (let i = 0; i < level.requests.length; i++) {
    if (gapsMs) {
      nextSendMs += gapsMs[i]!;
      const waitMs = nextSendMs - performance.now();
      if (waitMs > 0) await new Promise((r) => setTimeout(r, waitMs));
    }
    while (numInFlight >= maxInFlight) await new Promise<void>((r) => waiters.push(r));
    numInFlight++;
    const spec = level.requests[i]!;
    const nonce = level.nonce === 'per-request' ? freshNonce(vocabSize) : levelNonce;
    const req: CompletionRequest = {
      url: target.url,
      model: target.model,
      prompt: nonce ? applyNonce(spec.prompt, nonce) : spec.prompt,
      maxTokens: spec.maxTokens,
      ignoreEos: level.ignoreEos,
      ...(target.extraBody ? { extraBody: target.extraBody } : {}),
      ...(target.headers ? { headers: target.headers } : {}),
      ...(opts.timeoutMs ? { timeoutMs: opts.timeoutMs } : {}),
    };
    inFlight.push(
      send(req)
        .catch((e: unknown): RequestResult => failedResult(e))
        .then((r) => {
          results[i] = r;
          numInFlight--;
          waiters.shift()?.();
          onDone();
        }),
    );
  }
  await Promise.all(inFlight);
  return { results, approxPromptTokens: level.requests.map((r) => r.approxPromptTokens), startMs, endMs: performance.now() };
}

async function warmUp(target: BenchTarget, opts: BenchServeOptions): Promise<void> {
  const send = opts.send ?? streamCompletion;
  const n = opts.numWarmupRequests ?? 0;
  const rs = await Promise.all(
    Array.from({ length: n }, () =>
      send({ url: target.url, model: target.model, prompt: `${freshNonce(32000).text} warm up`, maxTokens: 8, ignoreEos: true, ...(target.extraBody ? { extraBody: target.extraBody } : {}) }),
    ),
  );
  const failed = rs.find((r) => !r.ok);
  if (failed) throw new Error(`warm-up against ${target.name} (${target.url}) failed: ${failed.error}`);
}

export async function benchServe(opts: BenchServeOptions): Promise<BenchServeResult> {
  const { targets, workload } = opts;
  if (targets.length === 0) throw new Error('bench serve needs at least one target');
  const names = targets.map((t) => t.name);
  if (new Set(names).size !== names.length) throw new Error(`target names must be distinct: ${names.join(', ')}`);
  const numRounds = opts.numRounds ?? 2;
  const rng = seededRng(opts.seed ?? 11);
  const startedAt = new Date().toISOString();
  const bar = makeProgressBar(opts.progress ?? process.stderr.isTTY === true);
  const total = workload.levels.reduce((s, l) => s + l.requests.length, 0) * numRounds * targets.length;
  bar?.start(total, 0, { level: '', target: '', round: 0 });
  const runs: LevelRun[] = [];
  const raw = new Map<string, TimedResults[]>();
  try {
    for (const target of targets) await warmUp(target, opts);
    for (const level of workload.levels) {
      for (let round = 0; round < numRounds; round++) {
        for (const target of targets) {
          const payload = { level: level.name, target: target.name, round: round + 1 };
          const before = await opts.scrapeSpec?.(target) ?? null;
          const timed = await runLevel(target, level, opts, rng, () => bar?.increment(1, payload));
          if (opts.scrapeSpec) timed.spec = specDelta(before, await opts.scrapeSpec(target));
          const run: LevelRun = { level: level.name, target: target.name, round, metrics: levelMetrics([timed]) };
          runs.push(run);
          const key = `${level.name}\u0000${target.name}`;
          raw.set(key, [...(raw.get(key) ?? []), timed]);
          opts.onRun?.(run);
        }
      }
    }
  } finally {
    bar?.stop();
  }
  const summaries: LevelSummary[] = workload.levels.flatMap((level) =>
    targets.map((t) => ({
      level: level.name,
      concurrency: level.concurrency,
      requestRatePerS: level.requestRatePerS,
      target: t.name,
      metrics: levelMetrics(raw.get(`${level.name}\u0000${t.name}`) ?? []),
    })),
  );
  return {
    workload: {
      name: workload.name,
      description: workload.description,
      promptFormat: workload.promptFormat,
      levels: workload.levels.map((l) => ({ name: l.name, concurrency: l.concurrency, requestRatePerS: l.requestRatePerS,
        ...(l.burstiness !== undefined ? { burstiness: l.burstiness } : {}), numRequests: l.requests.length })),
    },
    targets: targets.map((t) => ({ name: t.name, url: t.url, model: t.model })),
    numRounds,
    startedAt,
    finishedAt: new Date().toISOString(),
    runs,
    summaries,
    ratios: levelRatios(runs, names),
  };
}
