// The human end of quire bench offline: one table row per run, and for W5 the prefix cache on against off (the
// comparison the run exists for). The raw results go to --json.

import type { SpecDecodingStats } from '../engine/spec/spec-decode.js';
import type { OfflineResult } from './offline.js';

export type OfflineRun = OfflineResult & Record<string, unknown>;

const fmt = (n: number, digits = 1): string => n.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits });
const int = (n: number): string => n.toLocaleString('en-US', { maximumFractionDigits: 0 });

function table(header: string[], rows: string[][]): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  const line = (cells: string[]) => cells.map((c, i) => (i === 0 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join('  ');
  return [line(header), widths.map((w) => '-'.repeat(w)).join('  '), ...rows.map(line)].join('\n');
}

export function offlineSummary(runs: readonly OfflineRun[]): string {
  const rows = runs.map((r) => [
    r.workload,
    int(r.numRequests),
    int(r.numPromptTokens),
    int(r.numOutputTokens),
    fmt(r.wallS, 2),
    fmt(r.outputTokensPerS),
    fmt((r.numPromptTokens + r.numOutputTokens) / r.wallS),
    r.ttftP50Ms === null ? '-' : fmt(r.ttftP50Ms),
    int(r.stats.numPreemptions),
  ]);
  const lines = [table(['run', 'requests', 'prompt tok', 'output tok', 'wall s', 'output tok/s', 'total tok/s',
    'TTFT p50 ms', 'preempted'], rows)];
  const on = runs.find((r) => /prefix cache on/.test(r.workload));
  const off = runs.find((r) => /prefix cache off/.test(r.workload));
  if (on && off) {
    const speedup = off.wallS / on.wallS;
    lines.push('', `prefix cache on vs off: ${fmt(speedup, 2)}x ${speedup >= 1 ? 'faster' : 'slower'} `
      + `(${fmt(on.wallS, 2)} s against ${fmt(off.wallS, 2)} s); it computed ${int(on.stats.numPromptTokens)} of the `
      + `${int(on.numPromptTokens)} prompt tokens sent (${fmt(100 * on.stats.numPromptTokens / Math.max(1, on.numPromptTokens))}%), `
      + `against ${int(off.stats.numPromptTokens)} without it; TTFT p50 ${on.ttftP50Ms === null ? '-' : fmt(on.ttftP50Ms)} ms `
      + `against ${off.ttftP50Ms === null ? '-' : fmt(off.ttftP50Ms)} ms`);
  }
  for (const r of runs) {
    if (typeof r.shareOfBandwidthFloor === 'number') {
      lines.push(`${r.workload}: ${fmt(100 * r.shareOfBandwidthFloor)}% of the time the weights, KV and state traffic `
        + 'take at full copy bandwidth (the bandwidth floor)');
    }
    if (typeof r.modelTflopPerS === 'number') {
      lines.push(`${r.workload}: ${fmt(r.promptTokensPerS as number)} prompt tokens/s, ${fmt(r.modelTflopPerS, 3)} TFLOP/s`
        + (typeof r.shareOfGemmPeak === 'number' ? `, ${fmt(100 * r.shareOfGemmPeak)}% of the GEMM peak` : ''));
    }
    const spec = specDecodingLine(r.stats.specDecoding);
    if (spec !== null) lines.push(`${r.workload}: ${spec}`);
    if (typeof r.reservedFullContextSeqs === 'number') {
      lines.push(`${r.workload}: ${int(r.stats.numRunningPeak)} sequences ran at once where a full-context reservation `
        + `would allow ${int(r.reservedFullContextSeqs)} (${fmt(r.ratioVsReserved as number, 2)}x); ${int(r.stats.numPreemptions)} preemptions`);
    }
  }
  return lines.join('\n');
}

/**
 * Speculative decoding's counters since `since` (or since start) in one line, with vLLM's mean acceptance length:
 * 1 + accepted / drafts, the tokens a verify step yields on average. null without drafts.
 */
export function specDecodingLine(now: SpecDecodingStats | undefined, since?: SpecDecodingStats): string | null {
  if (now === undefined) return null;
  const drafts = now.numDrafts - (since?.numDrafts ?? 0);
  const draftTokens = now.numDraftTokens - (since?.numDraftTokens ?? 0);
  const accepted = now.numAcceptedTokens - (since?.numAcceptedTokens ?? 0);
  if (drafts <= 0) return null;
  const perPos = now.numAcceptedTokensPerPos.map((n, i) => fmt((n - (since?.numAcceptedTokensPerPos[i] ?? 0)) / drafts, 2));
  return `speculative decoding: mean acceptance length ${fmt(1 + accepted / drafts, 2)} (${int(accepted)} of `
    + `${int(draftTokens)} draft tokens accepted, ${fmt(100 * accepted / Math.max(1, draftTokens))}%, over ${int(drafts)} `
    + `drafts; per position ${perPos.join(', ')})`;
}

