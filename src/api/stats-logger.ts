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
    return line;
  }
}
