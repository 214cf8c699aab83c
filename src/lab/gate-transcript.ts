// Transcript gate: greedy generations of a fixed prompt set, md5 per path key,
// compared to a recorded canonical file. A path promises these exact tokens.

import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { basename, dirname } from 'node:path';
import { streamCompletion } from './client.js';
import type { GateCheck } from './gate.js';

export interface Generation {
  tokenIds: number[];
  text: string;
}

/** Greedy (temperature 0), EOS ignored, exactly maxTokens tokens per prompt. */
export interface Generator {
  generate(prompts: (string | number[])[], maxTokens: number): Promise<Generation[]>;
}

export interface GatePrompt {
  id: string;
  prompt: string | number[];
}

export interface GatePromptSet {
  maxTokens: number;
  prompts: GatePrompt[];
}

export function loadGatePrompts(path: string): GatePromptSet {
  const obj = JSON.parse(readFileSync(path, 'utf8')) as Partial<GatePromptSet>;
  if (!Number.isInteger(obj.maxTokens) || !Array.isArray(obj.prompts) || obj.prompts.length === 0) {
    throw new Error(`${path}: expected {"maxTokens": int, "prompts": [{"id", "prompt"}, ...]}`);
  }
  return obj as GatePromptSet;
}

interface RecordedPrompt {
  id: string;
  md5: string;
  tokenIds: number[];
  text: string;
}

interface RecordedPath {
  md5: string;
  maxTokens: number;
  recordedAt: string;
  prompts: RecordedPrompt[];
}

interface CanonicalFile {
  version: 1;
  paths: Record<string, RecordedPath>;
}

export interface TranscriptMismatch {
  promptId: string;
  prompt: string | number[];
  /** First differing token index; equal to the shorter length when one is a prefix of the other. */
  index: number;
  expectedContext: number[];
  actualContext: number[];
  expectedText: string;
  actualText: string;
}

export interface TranscriptGateOptions {
  generator: Generator;
  prompts: GatePromptSet;
  /** e.g. `cpu-f32`, `cuda-bf16-graphs`. */
  pathKey: string;
  canonicalPath: string;
  /** record writes (or replaces) this path's entry; check compares against it. */
  mode: 'check' | 'record';
  /** Tokens of context either side of a first difference; default 4. */
  contextTokens?: number;
}

export interface TranscriptGateResult {
  pathKey: string;
  /** What was checked: the file of recorded transcripts, how many prompts, greedy tokens each. */
  canonicalPath?: string;
  numPrompts?: number;
  maxTokens?: number;
  /** When the path's transcript was recorded. */
  recordedAt?: string;
  passed: boolean;
  recorded: boolean;
  md5: string;
  expectedMd5: string | null;
  mismatches: TranscriptMismatch[];
  /** Set when there is nothing to compare against. */
  problem?: string;
}

const md5 = (s: string) => createHash('md5').update(s).digest('hex');

export function transcriptMd5(tokenIdsPerPrompt: number[][]): string {
  return md5(JSON.stringify(tokenIdsPerPrompt));
}

function readCanonical(path: string): CanonicalFile {
  if (!existsSync(path)) return { version: 1, paths: {} };
  return JSON.parse(readFileSync(path, 'utf8')) as CanonicalFile;
}

export function firstDifference(expected: readonly number[], actual: readonly number[]): number {
  const n = Math.min(expected.length, actual.length);
  for (let i = 0; i < n; i++) if (expected[i] !== actual[i]) return i;
  return expected.length === actual.length ? -1 : n;
}

export async function runTranscriptGate(opts: TranscriptGateOptions): Promise<TranscriptGateResult> {
  const { prompts, pathKey } = opts;
  const gens = await opts.generator.generate(prompts.prompts.map((p) => p.prompt), prompts.maxTokens);
  if (gens.length !== prompts.prompts.length) throw new Error(`generator returned ${gens.length} of ${prompts.prompts.length} transcripts`);
  const actualMd5 = transcriptMd5(gens.map((g) => g.tokenIds));
  const canonical = readCanonical(opts.canonicalPath);
  const what = { canonicalPath: opts.canonicalPath, numPrompts: prompts.prompts.length, maxTokens: prompts.maxTokens };
  if (opts.mode === 'record') {
    canonical.paths[pathKey] = {
      md5: actualMd5,
      maxTokens: prompts.maxTokens,
      recordedAt: new Date().toISOString(),
      prompts: prompts.prompts.map((p, i) => ({ id: p.id, md5: md5(JSON.stringify(gens[i]!.tokenIds)), tokenIds: gens[i]!.tokenIds, text: gens[i]!.text })),
    };
    mkdirSync(dirname(opts.canonicalPath), { recursive: true });
    writeFileSync(opts.canonicalPath, `${JSON.stringify(canonical, null, 1)}\n`);
    return { pathKey, ...what, passed: true, recorded: true, md5: actualMd5, expectedMd5: actualMd5, mismatches: [] };
  }
  const expected = canonical.paths[pathKey];
  if (!expected) {
    return { pathKey, ...what, passed: false, recorded: false, md5: actualMd5, expectedMd5: null, mismatches: [], problem: `no recorded transcript for path ${pathKey} in ${opts.canonicalPath}` };
  }
  if (expected.maxTokens !== prompts.maxTokens) {
    return { pathKey, ...what, passed: false, recorded: false, md5: actualMd5, expectedMd5: expected.md5, mismatches: [], problem: `recorded with maxTokens ${expected.maxTokens}, run with ${prompts.maxTokens}` };
  }
  const ctx = opts.contextTokens ?? 4;
  const mismatches: TranscriptMismatch[] = [];
  prompts.prompts.forEach((p, i) => {
    const rec = expected.prompts.find((r) => r.id === p.id);
    const got = gens[i]!;
    const want = rec?.tokenIds ?? [];
    const index = rec ? firstDifference(want, got.tokenIds) : 0;
    if (index < 0) return;
    mismatches.push({
      promptId: p.id,
      prompt: p.prompt,
      index,
      expectedContext: want.slice(Math.max(0, index - ctx), index + ctx + 1),
      actualContext: got.tokenIds.slice(Math.max(0, index - ctx), index + ctx + 1),
      expectedText: rec?.text ?? '(not recorded)',
      actualText: got.text,
    });
  });
  return { pathKey, ...what, ...(expected.recordedAt ? { recordedAt: expected.recordedAt } : {}),
    passed: mismatches.length === 0 && actualMd5 === expected.md5, recorded: false, md5: actualMd5, expectedMd5: expected.md5, mismatches };
}

export function formatMismatch(m: TranscriptMismatch): string {
  const prompt = typeof m.prompt === 'string' ? JSON.stringify(m.prompt) : `[${m.prompt.length} token ids]`;
  const start = Math.max(0, m.index - 4);
  return [
    `prompt ${m.promptId}: ${prompt}`,
    `  first difference at token ${m.index} (context from token ${start})`,
    `  expected: ${m.expectedContext.join(' ')}`,
    `  actual:   ${m.actualContext.join(' ')}`,
  ].join('\n');
}

export function transcriptCheck(r: TranscriptGateResult): GateCheck {
  const of = r.numPrompts === undefined ? '' : ` (${r.numPrompts} prompts x ${r.maxTokens} greedy tokens)`;
  const file = r.canonicalPath === undefined ? 'the recorded one' : `${basename(r.canonicalPath)} [${r.pathKey}]`;
  const detail = r.problem
    ? r.problem
    : r.recorded
      ? `md5 ${r.md5} recorded in ${file}${of}`
      : r.passed
        ? `md5 ${r.md5} = ${file}${r.recordedAt ? `, recorded ${r.recordedAt.slice(0, 10)}` : ''}${of}`
        : `md5 ${r.md5} != ${r.expectedMd5} in ${file}${of}; ${r.mismatches.map((m) => `${m.promptId}@${m.index}`).join(', ')}`;
  return { name: `transcript ${r.pathKey}`, kind: 'transcript', passed: r.passed, detail };
}

/** Greedy generations over HTTP /v1/completions, token ids from `return_token_ids` (or `token_id:N` logprob strings). */
export class HttpGenerator implements Generator {
  constructor(
    readonly url: string,
    readonly model: string,
    readonly extraBody: Record<string, unknown> = {},
  ) {}

  async generate(prompts: (string | number[])[], maxTokens: number): Promise<Generation[]> {
    const out: Generation[] = [];
    for (const prompt of prompts) {
      const r = await streamCompletion({
        url: this.url,
        model: this.model,
        prompt,
        maxTokens,
        temperature: 0,
        ignoreEos: true,
        returnTokenIds: true,
        extraBody: this.extraBody,
      });
      if (!r.ok) throw new Error(`generation failed: ${r.error}`);
      if (!r.tokenIds) throw new Error(`${this.url} did not return token ids (needs return_token_ids or return_tokens_as_token_ids with logprobs)`);
      out.push({ tokenIds: r.tokenIds, text: r.text });
    }
    return out;
  }
}
