// Correctness gates around a benchmark: what held before it and after it.

export type GateKind = 'transcript' | 'reference' | 'ops';

export interface GateCheck {
  /** e.g. `transcript cpu-f32`, `ops cuda`. */
  name: string;
  kind: GateKind;
  passed: boolean;
  /** One line: md5, KL figures, passed/total. */
  detail: string;
}

export interface GateSummary {
  /** Gates run before the benchmark. */
  pre: GateCheck[];
  /** Gates run after it; empty when run once. */
  post: GateCheck[];
}

export function gatesPassed(summary: GateSummary): boolean {
  return [...summary.pre, ...summary.post].every((c) => c.passed);
}

function cell(c: GateCheck | undefined): string {
  if (!c) return '-';
  return `${c.passed ? 'PASS' : 'FAIL'} ${c.detail}`.replace(/\|/g, '\\|');
}

/** Markdown table, one row per gate, with a post column when there are post checks. */
export function formatGateSummary(summary: GateSummary): string {
  const names = [...new Set([...summary.pre, ...summary.post].map((c) => c.name))];
  const withPost = summary.post.length > 0;
  const lines = withPost ? ['| gate | pre | post |', '|---|---|---|'] : ['| gate | result |', '|---|---|'];
  for (const name of names) {
    const pre = summary.pre.find((c) => c.name === name);
    const post = summary.post.find((c) => c.name === name);
    lines.push(withPost ? `| ${name} | ${cell(pre)} | ${cell(post)} |` : `| ${name} | ${cell(pre)} |`);
  }
  return lines.join('\n');
}

export { runTranscriptGate, HttpGenerator, loadGatePrompts, transcriptCheck, formatMismatch } from './gate-transcript.js';
export type { Generator, Generation, GatePrompt, GatePromptSet, TranscriptGateOptions, TranscriptGateResult, TranscriptMismatch } from './gate-transcript.js';
export { compareToReference, readReferenceFile, referenceCheck } from './gate-reference.js';
export type { ReferenceDump, ReferenceFile, StepDistribution, ReferenceThresholds, ReferenceGateResult } from './gate-reference.js';
export { completionUrl, dumpPeerReference, llamaCppCompletionBody, parseLlamaCppCompletion } from './peer-dump.js';
export type { PeerDump, PeerDumpOptions, PeerDumpPrompt, PeerTopEntry } from './peer-dump.js';
export { parseTestRunnerOutput, opsCheck } from './gate-ops.js';
export type { OpTestSummary } from './gate-ops.js';
