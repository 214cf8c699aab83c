// Bench results as JSON, Markdown, and one self-contained HTML page (inline
// SVG, no scripts, opens offline) with the provenance and the gates.

import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { BenchServeResult, LevelMetrics, LevelSummary, RatioMetric } from './bench-serve.js';
import { meanAcceptanceLength } from './spec-scrape.js';
import { formatGateSummary, type GateCheck, type GateSummary } from './gate.js';
import { provenanceRows, type Provenance } from './hardware.js';
import type { RatioSpread } from './stats.js';
import { barChart, escapeXml, lineChart, type Bar, type Series } from './svg-plot.js';

export interface BenchReport {
  title?: string;
  bench: BenchServeResult;
  provenance?: Provenance | null;
  gates?: GateSummary | null;
}

const f = (v: number, digits = 1) => (Number.isFinite(v) ? v.toFixed(digits) : '-');

const LEVEL_COLUMNS: [string, (m: LevelMetrics) => string][] = [
  ['requests', (m) => String(m.numRequests)],
  ['errors', (m) => String(m.numErrors)],
  ['TTFT p50/p90/p99 ms', (m) => `${f(m.ttftMs.p50)} / ${f(m.ttftMs.p90)} / ${f(m.ttftMs.p99)}`],
  ['TPOT p50/p90/p99 ms', (m) => `${f(m.tpotMs.p50, 2)} / ${f(m.tpotMs.p90, 2)} / ${f(m.tpotMs.p99, 2)}`],
  ['ITL p50/p99 ms', (m) => `${f(m.itlMs.p50, 2)} / ${f(m.itlMs.p99, 2)}`],
  ['E2E p50/p99 ms', (m) => `${f(m.e2eMs.p50)} / ${f(m.e2eMs.p99)}`],
  ['output tok/s', (m) => f(m.outputTokensPerS)],
  ['prompt tok/s', (m) => `${f(m.promptTokensPerS)}${m.promptTokensReported ? '' : ' (approx)'}`],
  ['per-seq tok/s', (m) => f(m.perSeqDecodeTokensPerS)],
  ['spec. acceptance length', (m) => {
    const len = meanAcceptanceLength(m.specDecoding);
    return len === null ? '-' : `${f(len, 2)} (${m.specDecoding!.numAcceptedTokens}/${m.specDecoding!.numDraftTokens})`;
  }],
  ['prompt tokens (cached)', (m) => `${m.numPromptTokens}${m.numCachedPromptTokens === null ? '' : ` (${m.numCachedPromptTokens})`}`],
  ['wall s', (m) => f(m.wallS, 2)],
];

const RATIO_COLUMNS: [RatioMetric, string][] = [
  ['outputTokensPerS', 'output tok/s'],
  ['promptTokensPerS', 'prompt tok/s'],
  ['perSeqDecodeTokensPerS', 'per-seq tok/s'],
  ['ttftP50Ms', 'TTFT p50'],
  ['tpotP50Ms', 'TPOT p50'],
  ['e2eP50Ms', 'E2E p50'],
];

export function formatRatio(r: RatioSpread): string {
  if (!Number.isFinite(r.median)) return '-';
  return `${r.median.toFixed(3)}x (${r.min.toFixed(3)}-${r.max.toFixed(3)}, spread ${(r.relativeSpread * 100).toFixed(1)}%)`;
}

function levelRows(bench: BenchServeResult): string[][] {
  return bench.summaries.map((s) => [s.level, s.target, ...LEVEL_COLUMNS.map(([, get]) => get(s.metrics))]);
}

function ratioRows(bench: BenchServeResult): string[][] {
  return bench.ratios.map((r) => [r.level, `${r.target} / ${r.baseline}`, ...RATIO_COLUMNS.map(([k]) => {
    const verdict = ratioVerdict(k, r.metrics[k].median);
    return `${formatRatio(r.metrics[k])}${verdict ? ` ${verdict}` : ''}`;
  })]);
}

function mdTable(header: string[], rows: string[][]): string {
  const esc = (c: string) => c.replace(/\|/g, '\\|');
  return [`| ${header.map(esc).join(' | ')} |`, `|${header.map(() => '---').join('|')}|`, ...rows.map((r) => `| ${r.map(esc).join(' | ')} |`)].join('\n');
}

export function reportJson(r: BenchReport): string {
  return `${JSON.stringify({ title: r.title ?? null, provenance: r.provenance ?? null, gates: r.gates ?? null, bench: r.bench }, (_k, v: unknown) => (typeof v === 'number' && !Number.isFinite(v) ? null : v), 1)}\n`;
}

export function reportMarkdown(r: BenchReport): string {
  const b = r.bench;
  const parts = [
    `# ${r.title ?? `${b.workload.name} serving benchmark`}`,
    '',
    `${b.workload.description}; ${b.numRounds} interleaved rounds per level; targets: ${b.targets.map((t) => `${t.name} (${t.model} at ${t.url})`).join(', ')}.`,
    '',
    '## Results',
    '',
    mdTable(['level', 'target', ...LEVEL_COLUMNS.map(([h]) => h)], levelRows(b)),
  ];
  if (b.ratios.length > 0) {
    parts.push('', `## Ratios to ${b.targets[0]!.name} (median over rounds, min-max, spread)`, '', mdTable(['level', 'ratio', ...RATIO_COLUMNS.map(([, h]) => h)], ratioRows(b)));
  }
  if (r.gates) parts.push('', '## Gates', '', formatGateSummary(r.gates));
  if (r.provenance) parts.push('', '## Provenance', '', mdTable(['', ''], provenanceRows(r.provenance)));
  return `${parts.join('\n')}\n`;
}

/** A cell: its text, or its text and a class (better / worse). */
type Cell = string | { text: string; cls: string };

function htmlTable(header: string[], rows: Cell[][], cls = ''): string {
  const th = header.map((h) => `<th>${escapeXml(h)}</th>`).join('');
  const td = (c: Cell) => (typeof c === 'string' ? `<td>${escapeXml(c)}</td>`
    : `<td${c.cls ? ` class="${c.cls}"` : ''}>${escapeXml(c.text)}</td>`);
  const trs = rows.map((row) => `<tr>${row.map(td).join('')}</tr>`).join('\n');
  return `<table${cls ? ` class="${cls}"` : ''}><thead><tr>${th}</tr></thead><tbody>\n${trs}\n</tbody></table>`;
}

function gateRows(g: GateSummary): string[][] {
  const names = [...new Set([...g.pre, ...g.post].map((c) => c.name))];
  const cell = (c: GateCheck | undefined) => (c ? `${c.passed ? 'PASS' : 'FAIL'} ${c.detail}` : '-');
  return names.map((n) => [n, cell(g.pre.find((c) => c.name === n)), ...(g.post.length ? [cell(g.post.find((c) => c.name === n))] : [])]);
}

function levelX(s: LevelSummary, index: number): number {
  return s.concurrency ?? s.requestRatePerS ?? index + 1;
}

/** Whether a ratio of this metric above 1 is better (rates) or worse (latencies). */
const HIGHER_IS_BETTER: Record<RatioMetric, boolean> = {
  outputTokensPerS: true, promptTokensPerS: true, perSeqDecodeTokensPerS: true, ttftP50Ms: false, tpotP50Ms: false, e2eP50Ms: false,
};

/** 'better', 'worse', or '' (within half a percent of 1, or not a number). */
export function ratioVerdict(metric: RatioMetric, median: number): 'better' | 'worse' | '' {
  if (!Number.isFinite(median) || Math.abs(median - 1) < 0.005) return '';
  return (median > 1) === HIGHER_IS_BETTER[metric] ? 'better' : 'worse';
}

const VERDICT_COLORS = { better: '#2a9d4b', worse: '#c0392b', '': '#888' };

/** A metric's min and max over a level's rounds for one target (the spread drawn on the plots). */
function roundSpread(b: BenchServeResult, level: string, target: string, pick: (m: LevelMetrics) => number): { lo?: number; hi?: number } {
  const values = b.runs.filter((r) => r.level === level && r.target === target).map((r) => pick(r.metrics)).filter(Number.isFinite);
  return values.length > 1 ? { lo: Math.min(...values), hi: Math.max(...values) } : {};
}

const PLOTTED: { id: string; title: string; unit: string; pick: (m: LevelMetrics) => number; p99?: (m: LevelMetrics) => number }[] = [
  { id: 'plot-ttft', title: 'TTFT', unit: 'ms', pick: (m) => m.ttftMs.p50, p99: (m) => m.ttftMs.p99 },
  { id: 'plot-tpot', title: 'TPOT', unit: 'ms', pick: (m) => m.tpotMs.p50, p99: (m) => m.tpotMs.p99 },
  { id: 'plot-output-throughput', title: 'Output throughput', unit: 'tokens/s', pick: (m) => m.outputTokensPerS },
  { id: 'plot-prompt-throughput', title: 'Prompt throughput', unit: 'tokens/s', pick: (m) => m.promptTokensPerS },
];

/**
 * The report's charts: each metric against concurrency (p50 with its spread over rounds, p99 dashed), or for a
 * run of one level, a bar per target with its spread; then the ratios to the first target, coloured better / worse.
 */
export function reportPlots(b: BenchServeResult): string[] {
  const levels = b.workload.levels.map((l) => l.name);
  const names = b.targets.map((t) => t.name);
  const charts: string[] = [];
  if (levels.length === 1) {
    for (const p of PLOTTED) {
      const bars = names.map((name): Bar => {
        const sum = b.summaries.find((x) => x.target === name)!;
        return { label: name, value: p.pick(sum.metrics), ...roundSpread(b, sum.level, name, p.pick) };
      });
      charts.push(barChart({ id: p.id, title: `${p.title}${p.p99 ? ' p50' : ''} at ${levels[0]} (spread over rounds)`,
        yLabel: p.unit, bars }, names));
    }
  } else {
    const allConcurrency = b.summaries.every((s) => s.concurrency !== null);
    const xs = b.summaries.map((s) => levelX(s, levels.indexOf(s.level)));
    const logX = xs.every((x) => x > 0) && Math.max(...xs) / Math.min(...xs) > 4;
    const xLabel = allConcurrency ? 'concurrency' : 'level';
    const seriesOf = (pick: (m: LevelMetrics) => number, suffix: string, dashed = false, withSpread = true): Series[] =>
      names.map((name) => ({
        name: suffix ? `${name} ${suffix}` : name,
        colorKey: name,
        dashed,
        points: b.summaries.filter((s) => s.target === name).map((s) => ({
          x: levelX(s, levels.indexOf(s.level)), y: pick(s.metrics), ...(withSpread ? roundSpread(b, s.level, name, pick) : {}),
        })),
      }));
    for (const p of PLOTTED) {
      const series = p.p99 ? [...seriesOf(p.pick, 'p50'), ...seriesOf(p.p99, 'p99', true, false)] : seriesOf(p.pick, '');
      charts.push(lineChart({ id: p.id, title: `${p.title} vs ${xLabel}`, xLabel, yLabel: p.unit, series, logX }, names));
    }
  }
  if (b.ratios.length > 0) {
    for (const [metric, title] of [['outputTokensPerS', 'output throughput'], ['ttftP50Ms', 'TTFT p50'], ['tpotP50Ms', 'TPOT p50']] as const) {
      const bars = b.ratios.map((r): Bar => {
        const spread = r.metrics[metric];
        const verdict = ratioVerdict(metric, spread.median);
        return { label: levels.length === 1 ? `${r.target} / ${r.baseline}` : `${r.level}: ${r.target}`, value: spread.median,
          lo: spread.min, hi: spread.max, color: VERDICT_COLORS[verdict], cls: verdict || 'even' };
      });
      charts.push(barChart({ id: `plot-ratio-${metric}`, title: `Ratio to ${names[0]}: ${title} (${HIGHER_IS_BETTER[metric]
        ? 'higher' : 'lower'} is better)`, yLabel: 'ratio', bars, reference: 1 }));
    }
  }
  return charts;
}

const CSS = `body{font-family:sans-serif;margin:24px;color:#222}table{border-collapse:collapse;margin:8px 0 20px;font-size:13px}
th,td{border:1px solid #ccc;padding:4px 8px;text-align:right}th{background:#f4f4f4}td:first-child,td:nth-child(2){text-align:left}
.plots{display:grid;grid-template-columns:repeat(auto-fit,minmax(460px,1fr));gap:16px;width:100%}
.plots svg{width:100%;height:auto}.fail{color:#b00}.pass{color:#070}td.better{color:#2a9d4b}td.worse{color:#c0392b}`;

export function reportHtml(r: BenchReport): string {
  const b = r.bench;
  const title = r.title ?? `${b.workload.name} serving benchmark`;
  const body: string[] = [
    `<h1>${escapeXml(title)}</h1>`,
    `<p>${escapeXml(b.workload.description)}; ${b.numRounds} interleaved rounds per level; ${escapeXml(b.startedAt)} to ${escapeXml(b.finishedAt)}.</p>`,
    htmlTable(['target', 'model', 'url'], b.targets.map((t) => [t.name, t.model, t.url]), 'targets'),
    `<h2>Plots</h2><div class="plots">${reportPlots(b).join('\n')}</div>`,
    '<h2>Results</h2>',
    htmlTable(['level', 'target', ...LEVEL_COLUMNS.map(([h]) => h)], levelRows(b), 'results'),
  ];
  if (b.ratios.length > 0) {
    body.push(`<h2>Ratios to ${escapeXml(b.targets[0]!.name)}</h2><p>Median over rounds (min-max, relative spread); above 1 is faster for rates, slower for latencies; green is better than the first target, red worse.</p>`);
    const cells = b.ratios.map((r): Cell[] => [r.level, `${r.target} / ${r.baseline}`,
      ...RATIO_COLUMNS.map(([k]) => ({ text: formatRatio(r.metrics[k]), cls: ratioVerdict(k, r.metrics[k].median) }))]);
    body.push(htmlTable(['level', 'ratio', ...RATIO_COLUMNS.map(([, h]) => h)], cells, 'ratios'));
  }
  if (r.gates) {
    body.push('<h2>Gates</h2>', htmlTable(['gate', r.gates.post.length ? 'pre' : 'result', ...(r.gates.post.length ? ['post'] : [])], gateRows(r.gates), 'gate-summary'));
  }
  if (r.provenance) body.push('<h2>Provenance</h2>', htmlTable(['', ''], provenanceRows(r.provenance), 'provenance'));
  return `<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>${escapeXml(title)}</title><style>${CSS}</style></head>\n<body>\n${body.join('\n')}\n</body></html>\n`;
}

export interface WrittenReport {
  jsonPath: string;
  markdownPath: string;
  htmlPath: string;
}

export function writeReport(r: BenchReport, outDir: string, baseName = 'bench'): WrittenReport {
  mkdirSync(outDir, { recursive: true });
  const paths = { jsonPath: join(outDir, `${baseName}.json`), markdownPath: join(outDir, `${baseName}.md`), htmlPath: join(outDir, `${baseName}.html`) };
  writeFileSync(paths.jsonPath, reportJson(r));
  writeFileSync(paths.markdownPath, reportMarkdown(r));
  writeFileSync(paths.htmlPath, reportHtml(r));
  return paths;
}
