// Timing arithmetic for the parity lab. All inputs are plain numbers; every
// function is pure so recorded timings can be replayed in tests.

/** Linear interpolation between closest ranks (numpy's default `linear` method). p in [0, 100]. */
export function percentile(values: readonly number[], p: number): number {
  if (values.length === 0) return NaN;
  if (p < 0 || p > 100) throw new RangeError(`percentile ${p} outside [0, 100]`);
  const sorted = [...values].sort((a, b) => a - b);
  const rank = ((sorted.length - 1) * p) / 100;
  const lo = Math.floor(rank);
  const hi = Math.ceil(rank);
  return sorted[lo]! + (sorted[hi]! - sorted[lo]!) * (rank - lo);
}

export function mean(values: readonly number[]): number {
  if (values.length === 0) return NaN;
  let sum = 0;
  for (const v of values) sum += v;
  return sum / values.length;
}

/** Population standard deviation (numpy's default ddof=0). */
export function stddev(values: readonly number[]): number {
  if (values.length === 0) return NaN;
  const m = mean(values);
  let sumSq = 0;
  for (const v of values) sumSq += (v - m) * (v - m);
  return Math.sqrt(sumSq / values.length);
}

export function median(values: readonly number[]): number {
  return percentile(values, 50);
}

export interface Distribution {
  count: number;
  mean: number;
  stddev: number;
  p50: number;
  p90: number;
  p99: number;
  min: number;
  max: number;
}

export function describe(values: readonly number[]): Distribution {
  return {
    count: values.length,
    mean: mean(values),
    stddev: stddev(values),
    p50: percentile(values, 50),
    p90: percentile(values, 90),
    p99: percentile(values, 99),
    min: values.length ? Math.min(...values) : NaN,
    max: values.length ? Math.max(...values) : NaN,
  };
}

/** Time per output token after the first; null when fewer than two tokens came back. */
export function tpotMs(e2eMs: number, ttftMs: number, numOutputTokens: number): number | null {
  if (numOutputTokens < 2) return null;
  return (e2eMs - ttftMs) / (numOutputTokens - 1);
}

/** Gaps between successive arrival times (ms); n arrivals give n - 1 gaps. */
export function interTokenGapsMs(arrivalTimesMs: readonly number[]): number[] {
  const gaps: number[] = [];
  for (let i = 1; i < arrivalTimesMs.length; i++) gaps.push(arrivalTimesMs[i]! - arrivalTimesMs[i - 1]!);
  return gaps;
}

/**
 * Decode rate by the difference method: the same batch run for g1 < g2 output
 * tokens; the extra tokens over the extra time, free of prefill and start-up.
 */
export function differenceMethodTokensPerS(batchSize: number, g1: number, t1Ms: number, g2: number, t2Ms: number): number {
  if (g2 <= g1) throw new RangeError(`difference method needs g2 > g1 (got ${g1}, ${g2})`);
  if (t2Ms <= t1Ms) throw new RangeError(`difference method needs t(g2) > t(g1) (got ${t1Ms} ms, ${t2Ms} ms)`);
  return (batchSize * (g2 - g1)) / ((t2Ms - t1Ms) / 1000);
}

export interface RatioSpread {
  /** One ratio per round: candidate / baseline. */
  perRound: number[];
  median: number;
  min: number;
  max: number;
  /** (max - min) / median: how far rounds disagree, relative to the result. */
  relativeSpread: number;
}

/** Ratio of a candidate's metric to a baseline's, round by round (rounds paired by index). */
export function ratioAcrossRounds(baseline: readonly number[], candidate: readonly number[]): RatioSpread {
  if (baseline.length !== candidate.length) {
    throw new RangeError(`rounds differ: ${baseline.length} baseline vs ${candidate.length} candidate`);
  }
  const perRound = baseline.map((b, i) => candidate[i]! / b);
  const finite = perRound.filter((r) => Number.isFinite(r));
  const med = median(finite);
  const min = finite.length ? Math.min(...finite) : NaN;
  const max = finite.length ? Math.max(...finite) : NaN;
  return { perRound, median: med, min, max, relativeSpread: (max - min) / med };
}
