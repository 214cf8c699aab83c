// vLLM's periodic engine stats line (every 10 s by default; `--disable-log-stats` turns it off): prompt and
// generation throughput over the interval, requests running and waiting, KV cache usage and the prefix cache hit
// rate over the interval. Intervals with nothing running, waiting or computed are not logged.

import type { EngineClient } from '../engine/client.js';

export const DEFAULT_STATS_INTERVAL_MS = 10_000;

interface Totals {
  atMs: number;
  promptTokens: number;
  generationTokens: number;
  queries: number;
  hits: number;
  /** Speculative decoding's counters (absent: off). */
  spec?: { drafts: number; drafted: number; accepted: number; perPos: number[] };
}

export class StatsLogger {
  private last: Totals | null = null;
  private timer: NodeJS.Timeout | null = null;

  constructor(
    private readonly engine: Pick<EngineClient, 'stats'>,
    private readonly log: (line: string) => void,
    private readonly now: () => number = () => performance.now(),
  ) {}

  start(intervalMs = DEFAULT_STATS_INTERVAL_MS): void {
    this.tick();
    this.timer = setInterval(() => this.tick(), intervalMs);
    this.timer.unref();
  }

  stop(): void {
    if (this.timer !== null) clearInterval(this.timer);
    this.timer = null;
  }

  /** Reads the engine's counters; logs the interval since the last tick when anything happened. Returns the line. */
  tick(): string | null {
    const s = this.engine.stats();
    const t: Totals = {
      atMs: this.now(), promptTokens: s.numPromptTokens, generationTokens: s.numGenerationTokens,
      queries: s.prefixCacheQueries, hits: s.prefixCacheHits,
      ...(s.specDecoding ? { spec: { drafts: s.specDecoding.numDrafts, drafted: s.specDecoding.numDraftTokens,
        accepted: s.specDecoding.numAcceptedTokens, perPos: s.specDecoding.numAcceptedTokensPerPos } } : {}),
    };
    const prev = this.last;
    this.last = t;
    if (prev === null) return null;
    const prompt = t.promptTokens - prev.promptTokens;
    const generation = t.generationTokens - prev.generationTokens;
    if (prompt === 0 && generation === 0 && s.numRunning === 0 && s.numWaiting === 0) return null;
    const seconds = Math.max(1e-9, (t.atMs - prev.atMs) / 1000);
    const queries = t.queries - prev.queries;
    const hitRate = queries > 0 ? (100 * (t.hits - prev.hits)) / queries : 0;
    const line = `Avg prompt throughput: ${(prompt / seconds).toFixed(1)} tokens/s, `
      + `Avg generation throughput: ${(generation / seconds).toFixed(1)} tokens/s, `
      + `Running: ${s.numRunning} reqs, Waiting: ${s.numWaiting} reqs, `
      + `KV cache usage: ${(100 * s.kvCacheUsage).toFixed(1)}%, Prefix cache hit rate: ${hitRate.toFixed(1)}%`;
    this.log(line);
    const spec = specLine(prev, t, seconds);
    if (spec !== null) this.log(spec);
    return spec === null ? line : `${line}\n${spec}`;
  }
}

/** vLLM's SpecDecoding metrics line over the interval, or null (speculation off, or no proposal in it). */
function specLine(prev: Totals, t: Totals, seconds: number): string | null {
  if (!prev.spec || !t.spec) return null;
  const drafts = t.spec.drafts - prev.spec.drafts;
  if (drafts <= 0) return null;
  const drafted = t.spec.drafted - prev.spec.drafted;
  const accepted = t.spec.accepted - prev.spec.accepted;
  const perPos = t.spec.perPos.map((v, j) => ((v - (prev.spec!.perPos[j] ?? 0)) / drafts).toFixed(3));
  return `SpecDecoding metrics: Mean acceptance length: ${(1 + accepted / drafts).toFixed(2)}, `
    + `Accepted throughput: ${(accepted / seconds).toFixed(2)} tokens/s, Drafted throughput: ${(drafted / seconds).toFixed(2)} tokens/s, `
    + `Accepted: ${accepted} tokens, Drafted: ${drafted} tokens, Per-position acceptance rate: ${perPos.join(', ')}, `
    + `Avg Draft acceptance rate: ${(drafted > 0 ? (100 * accepted) / drafted : 0).toFixed(1)}%`;
}
