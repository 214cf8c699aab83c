// Speculative decoding's counters of an OpenAI-compatible server, read from its Prometheus /metrics before and after
// each level of `quire bench serve`, so the report puts the mean acceptance length beside the throughput it bought.
// vLLM names them vllm:spec_decode_num_drafts_total, _num_draft_tokens_total and _num_accepted_tokens_total; Quire
// the same under quire:. A server without them (speculation off, or no /metrics) reports none.

/** Cumulative counters, summed over the label sets a server splits them by (engines, replicas). */
export interface SpecCounts {
  numDrafts: number;
  numDraftTokens: number;
  numAcceptedTokens: number;
}

const COUNTERS: [keyof SpecCounts, string][] = [
  ['numDrafts', 'spec_decode_num_drafts'],
  ['numDraftTokens', 'spec_decode_num_draft_tokens'],
  ['numAcceptedTokens', 'spec_decode_num_accepted_tokens'],
];

/** The counters in a Prometheus text exposition, or null when it has no drafts counter. */
export function parseSpecCounters(text: string): SpecCounts | null {
  const out: SpecCounts = { numDrafts: 0, numDraftTokens: 0, numAcceptedTokens: 0 };
  let found = false;
  for (const line of text.split('\n')) {
    const m = /^(?:vllm|quire):(spec_decode_num_[a-z_]+?)(?:_total)?(?:\{[^}]*\})?\s+(\S+)/.exec(line);
    if (!m) continue;
    const field = COUNTERS.find(([, name]) => name === m[1]);
    const value = Number(m[2]);
    if (!field || !Number.isFinite(value)) continue;
    out[field[0]] += value;
    if (field[0] === 'numDrafts') found = true;
  }
  return found ? out : null;
}

/** A target's /metrics URL from its base URL (`http://host:port`, `.../v1` or `.../v1/completions`). */
export function metricsUrl(url: string): string {
  return `${url.replace(/\/+$/, '').replace(/\/completions$/, '').replace(/\/v1$/, '')}/metrics`;
}

/** The server's counters now, or null (no such counters, not reachable within timeoutMs, not Prometheus). */
export async function scrapeSpecCounters(url: string, timeoutMs = 5000): Promise<SpecCounts | null> {
  try {
    const res = await fetch(metricsUrl(url), { signal: AbortSignal.timeout(timeoutMs) });
    return res.ok ? parseSpecCounters(await res.text()) : null;
  } catch {
    return null;
  }
}

/** after - before, or null when either is missing. */
export function specDelta(before: SpecCounts | null, after: SpecCounts | null): SpecCounts | null {
  if (before === null || after === null) return null;
  return { numDrafts: after.numDrafts - before.numDrafts, numDraftTokens: after.numDraftTokens - before.numDraftTokens,
    numAcceptedTokens: after.numAcceptedTokens - before.numAcceptedTokens };
}

/** vLLM's mean acceptance length: the tokens a verify step yields, 1 + accepted / drafts; null without drafts. */
export function meanAcceptanceLength(c: SpecCounts | null): number | null {
  return c === null || c.numDrafts === 0 ? null : 1 + c.numAcceptedTokens / c.numDrafts;
}
