// Load test: N concurrent streaming clients against an OpenAI-compatible
// server; reports errors, TTFT / end-to-end latency percentiles and, given a
// pid, the server process's resident memory (peak while the test ran).
//
//   node dist/src/api/load-test.js --url http://127.0.0.1:8000 --clients 1000 --pid 1234

import { readFileSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
import { Command, InvalidArgumentError } from 'commander';
import { percentile } from './stats.js';

export interface LoadTestOptions {
  url: string;
  numClients: number;
  maxTokens: number;
  prompt: string;
  model: string | null;
  apiKey: string | null;
  /** Server process to sample VmRSS of (Linux /proc). */
  pid: number | null;
  timeoutMs: number;
}

export interface Percentiles {
  p50: number;
  p90: number;
  p99: number;
  max: number;
}

export interface LoadTestReport {
  numClients: number;
  numOk: number;
  numErrors: number;
  /** Error text -> how many clients saw it. */
  errors: Record<string, number>;
  ttftMs: Percentiles;
  e2eMs: Percentiles;
  numChunks: number;
  wallMs: number;
  chunksPerSecond: number;
  rssBytesStart: number | null;
  rssBytesPeak: number | null;
  rssBytesEnd: number | null;
}

export const DEFAULT_LOAD_TEST: Omit<LoadTestOptions, 'url'> = {
  numClients: 1000, maxTokens: 32, prompt: 'Tell me a story about a lighthouse keeper.', model: null, apiKey: null, pid: null, timeoutMs: 300_000,
};

export function readRssBytes(pid: number): number | null {
  try {
    const m = /^VmRSS:\s+(\d+)\s+kB/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m ? Number(m[1]) * 1024 : null;
  } catch {
    return null;
  }
}

function percentiles(values: number[]): Percentiles {
  return { p50: percentile(values, 50), p90: percentile(values, 90), p99: percentile(values, 99), max: values.length ? Math.max(...values) : NaN };
}

interface ClientResult {
  ok: boolean;
  error?: string;
  ttftMs?: number;
  e2eMs: number;
  numChunks: number;
}

async function oneClient(o: LoadTestOptions, i: number): Promise<ClientResult> {
  const t0 = performance.now();
  const headers: Record<string, string> = { 'content-type': 'application/json' };
  if (o.apiKey !== null) headers.authorization = `Bearer ${o.apiKey}`;
  const body = {
    ...(o.model !== null ? { model: o.model } : {}),
    prompt: `[${i}-${Math.random().toString(36).slice(2)}] ${o.prompt}`,
    max_tokens: o.maxTokens, stream: true, ignore_eos: true,
  };
  try {
    const res = await fetch(`${o.url.replace(/\/$/, '')}/v1/completions`, {
      method: 'POST', headers, body: JSON.stringify(body), signal: AbortSignal.timeout(o.timeoutMs),
    });
    if (res.status !== 200) return { ok: false, error: `HTTP ${res.status}`, e2eMs: performance.now() - t0, numChunks: 0 };
    const decoder = new TextDecoder();
    let buffered = '';
    let ttftMs: number | undefined;
    let numChunks = 0;
    let done = false;
    let error: string | undefined;
    for await (const bytes of res.body!) {
      buffered += decoder.decode(bytes as Uint8Array, { stream: true });
      let cut: number;
      while ((cut = buffered.indexOf('\n\n')) >= 0) {
        const frame = buffered.slice(0, cut);
        buffered = buffered.slice(cut + 2);
        if (!frame.startsWith('data: ')) continue;
        const data = frame.slice(6);
        if (data === '[DONE]') {
          done = true;
          continue;
        }
        const chunk = JSON.parse(data) as { error?: { message: string }; choices?: { text?: string }[] };
        if (chunk.error) error = `stream error: ${chunk.error.message}`;
        else if (chunk.choices?.some((c) => (c.text ?? '').length > 0)) {
          ttftMs ??= performance.now() - t0;
          numChunks++;
        }
      }
    }
    const e2eMs = performance.now() - t0;
    if (error !== undefined) return { ok: false, error, ttftMs, e2eMs, numChunks };
    if (!done) return { ok: false, error: 'stream ended without [DONE]', ttftMs, e2eMs, numChunks };
    return { ok: true, ttftMs, e2eMs, numChunks };
  } catch (e) {
    return { ok: false, error: (e as Error).name === 'TimeoutError' ? 'timeout' : (e as Error).message, e2eMs: performance.now() - t0, numChunks: 0 };
  }
}

export async function runLoadTest(opts: Partial<LoadTestOptions> & { url: string }): Promise<LoadTestReport> {
  const o: LoadTestOptions = { ...DEFAULT_LOAD_TEST, ...opts };
  const rss = () => (o.pid !== null ? readRssBytes(o.pid) : null);
  const rssBytesStart = rss();
  let rssBytesPeak = rssBytesStart;
  const sampler = setInterval(() => {
    const v = rss();
    if (v !== null) rssBytesPeak = Math.max(rssBytesPeak ?? 0, v);
  }, 100);
  const t0 = performance.now();
  const results = await Promise.all(Array.from({ length: o.numClients }, (_, i) => oneClient(o, i)));
  const wallMs = performance.now() - t0;
  clearInterval(sampler);
  const errors: Record<string, number> = {};
  for (const r of results) if (!r.ok) errors[r.error!] = (errors[r.error!] ?? 0) + 1;
  const numChunks = results.reduce((a, r) => a + r.numChunks, 0);
  const rssBytesEnd = rss();
  return {
    numClients: o.numClients,
    numOk: results.filter((r) => r.ok).length,
    numErrors: results.filter((r) => !r.ok).length,
    errors,
    ttftMs: percentiles(results.flatMap((r) => (r.ttftMs !== undefined ? [r.ttftMs] : []))),
    e2eMs: percentiles(results.filter((r) => r.ok).map((r) => r.e2eMs)),
    numChunks,
    wallMs,
    chunksPerSecond: numChunks / (wallMs / 1000),
    rssBytesStart,
    rssBytesPeak: rssBytesPeak === null || rssBytesEnd === null ? rssBytesPeak : Math.max(rssBytesPeak, rssBytesEnd),
    rssBytesEnd,
  };
}

export function formatReport(r: LoadTestReport): string {
  const ms = (p: Percentiles) => `p50 ${p.p50.toFixed(1)}  p90 ${p.p90.toFixed(1)}  p99 ${p.p99.toFixed(1)}  max ${p.max.toFixed(1)} ms`;
  const mib = (b: number | null) => (b === null ? 'n/a' : `${(b / 2 ** 20).toFixed(1)} MiB`);
  const lines = [
    `clients ${r.numClients}: ${r.numOk} ok, ${r.numErrors} errors in ${(r.wallMs / 1000).toFixed(2)} s`,
    `ttft  ${ms(r.ttftMs)}`,
    `e2e   ${ms(r.e2eMs)}`,
    `chunks ${r.numChunks} (${r.chunksPerSecond.toFixed(0)}/s)`,
    `server rss: start ${mib(r.rssBytesStart)}, peak ${mib(r.rssBytesPeak)}, end ${mib(r.rssBytesEnd)}`,
  ];
  for (const [e, n] of Object.entries(r.errors)) lines.push(`error x${n}: ${e}`);
  return lines.join('\n');
}

function positiveInt(v: string): number {
  const n = Number(v);
  if (!Number.isInteger(n) || n < 1) throw new InvalidArgumentError('expected a positive integer');
  return n;
}

export async function main(argv: string[]): Promise<void> {
  const cmd = new Command('load-test')
    .description('N concurrent streaming clients against an OpenAI-compatible server')
    .requiredOption('--url <url>', 'server base URL, e.g. http://127.0.0.1:8000')
    .option('--clients <n>', 'concurrent streaming clients', positiveInt, DEFAULT_LOAD_TEST.numClients)
    .option('--max-tokens <n>', 'max_tokens per request', positiveInt, DEFAULT_LOAD_TEST.maxTokens)
    .option('--prompt <text>', 'prompt (a unique nonce is prepended per client)', DEFAULT_LOAD_TEST.prompt)
    .option('--model <name>', 'model name to send')
    .option('--api-key <key>', 'bearer token')
    .option('--pid <pid>', 'server process id, to report its RSS', positiveInt)
    .option('--timeout-ms <ms>', 'per-request timeout', positiveInt, DEFAULT_LOAD_TEST.timeoutMs)
    .option('--json', 'print the report as JSON');
  cmd.parse(argv);
  const f = cmd.opts<{ url: string; clients: number; maxTokens: number; prompt: string; model?: string; apiKey?: string; pid?: number; timeoutMs: number; json?: boolean }>();
  const report = await runLoadTest({
    url: f.url, numClients: f.clients, maxTokens: f.maxTokens, prompt: f.prompt, model: f.model ?? null,
    apiKey: f.apiKey ?? null, pid: f.pid ?? null, timeoutMs: f.timeoutMs,
  });
  console.log(f.json ? JSON.stringify(report, null, 2) : formatReport(report));
  if (report.numErrors > 0) process.exitCode = 1;
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) await main(process.argv);
