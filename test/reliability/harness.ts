// A real `quire serve` on the demo model (CPU backend) in a child process, for the reliability suite.

import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { dirname, join } from 'node:path';

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..', '..');

export interface Served {
  url: string;
  child: ChildProcess;
  /** Everything the server wrote to stdout and stderr. */
  log(): string;
  /** Resolves with the exit code (or signal) once the process ends. */
  exited: Promise<number | string | null>;
}

/** Starts `quire serve models/quire-demo --port 0 ...extra` and resolves once it is ready. */
export async function startServe(extra: string[] = []): Promise<Served> {
  const child = spawn(process.execPath, [join(root, 'dist/src/cli/main.js'), 'serve', join(root, 'models/quire-demo'),
    '--port', '0', '--disable-log-stats', ...extra], { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  const exited = new Promise<number | string | null>((resolve) => child.on('exit', (code, signal) => resolve(code ?? signal)));
  const url = await new Promise<string>((resolve, reject) => {
    const onData = (d: Buffer) => {
      out += d.toString();
      const m = /ready on (http:\/\/[^\s]+)/.exec(out);
      if (m) resolve(m[1]!);
    };
    child.stdout!.on('data', onData);
    child.stderr!.on('data', (d: Buffer) => (out += d.toString()));
    void exited.then((code) => reject(new Error(`quire serve exited (${code}) before it was ready:\n${out}`)));
  });
  return { url, child, log: () => out, exited };
}

export interface Reply {
  status: number;
  json: any;
  text: string;
}

/** POST (or another method) with a time limit: a hang is a failure, not a stuck test. */
export async function send(url: string, body: unknown, init: { method?: string; contentType?: string; timeoutMs?: number } = {}): Promise<Reply> {
  const res = await fetch(url, {
    method: init.method ?? 'POST',
    headers: { 'content-type': init.contentType ?? 'application/json' },
    ...(init.method === 'GET' ? {} : { body: typeof body === 'string' ? body : JSON.stringify(body) }),
    signal: AbortSignal.timeout(init.timeoutMs ?? 30_000),
  });
  const text = await res.text();
  let json: unknown = null;
  try {
    json = JSON.parse(text);
  } catch {
    json = null;
  }
  return { status: res.status, json, text };
}

/** The server still answers /health and a plain completion. */
export async function stillServing(url: string): Promise<void> {
  const health = await fetch(`${url}/health`, { signal: AbortSignal.timeout(10_000) });
  if (health.status !== 200) throw new Error(`/health answered ${health.status}`);
  const r = await send(`${url}/v1/completions`, { prompt: 'Once upon a time', max_tokens: 2 }, { timeoutMs: 20_000 });
  if (r.status !== 200) throw new Error(`a plain completion answered ${r.status}: ${r.text.slice(0, 300)}`);
}
