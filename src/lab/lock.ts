// A benchmark lock so two benchmarks never share a GPU, and a preflight that
// refuses to start while other processes hold it.

import { mkdirSync, readFileSync, unlinkSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import { dirname, join } from 'node:path';
import { runCommand, type CommandRunner } from './hardware.js';

export interface LockInfo {
  pid: number;
  host: string;
  owner: string;
  startedAt: string;
}

export interface BenchLockOptions {
  /** Directory of the lock file; default ~/.cache/quire/locks. */
  dir?: string;
  /** File name in `dir`; default gpu.lock. */
  name?: string;
  owner?: string;
  /** A lock older than this is stale whatever its pid; default 24 h. */
  maxAgeMs?: number;
  /** Take the lock even when it is held. */
  force?: boolean;
}

export interface BenchLock {
  path: string;
  info: LockInfo;
  release(): void;
}

export class BenchLockHeldError extends Error {
  constructor(
    readonly path: string,
    readonly holder: LockInfo,
  ) {
    super(`benchmark lock ${path} is held by pid ${holder.pid} on ${holder.host} (${holder.owner}) since ${holder.startedAt}`);
  }
}

export function defaultLockDir(): string {
  return join(os.homedir(), '.cache', 'quire', 'locks');
}

export function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'EPERM';
  }
}

export function isLockStale(info: LockInfo, nowMs: number, maxAgeMs: number, host = os.hostname()): boolean {
  const startedMs = Date.parse(info.startedAt);
  if (!Number.isFinite(startedMs) || nowMs - startedMs > maxAgeMs) return true;
  return info.host === host && !pidAlive(info.pid);
}

function readLock(path: string): LockInfo | null {
  try {
    const obj = JSON.parse(readFileSync(path, 'utf8')) as Partial<LockInfo>;
    if (typeof obj.pid !== 'number' || typeof obj.host !== 'string' || typeof obj.startedAt !== 'string') return null;
    return { pid: obj.pid, host: obj.host, owner: String(obj.owner ?? ''), startedAt: obj.startedAt };
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') throw e;
    return null;
  }
}

/** Creates the lock file atomically; a stale or forced lock is replaced. Released on exit, Ctrl-C or SIGTERM. */
export function acquireBenchLock(opts: BenchLockOptions = {}): BenchLock {
  const path = join(opts.dir ?? defaultLockDir(), opts.name ?? 'gpu.lock');
  mkdirSync(dirname(path), { recursive: true });
  const maxAgeMs = opts.maxAgeMs ?? 24 * 3600 * 1000;
  const info: LockInfo = {
    pid: process.pid,
    host: os.hostname(),
    owner: opts.owner ?? `${os.userInfo().username} ${process.argv.slice(1).join(' ')}`.trim(),
    startedAt: new Date().toISOString(),
  };
  for (let attempt = 0; attempt < 5; attempt++) {
    try {
      writeFileSync(path, JSON.stringify(info), { flag: 'wx' });
      return makeHandle(path, info);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
    }
    let holder: LockInfo | null;
    try {
      holder = readLock(path);
    } catch {
      continue;
    }
    if (holder && !opts.force && !isLockStale(holder, Date.now(), maxAgeMs)) throw new BenchLockHeldError(path, holder);
    try {
      unlinkSync(path);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw e;
    }
  }
  throw new Error(`could not take the benchmark lock ${path}: it keeps changing hands`);
}

/** Signals that end a benchmark (Ctrl-C, kill): the lock is released, then the signal does what it would have done. */
const ENDING_SIGNALS = ['SIGINT', 'SIGTERM', 'SIGHUP'] as const;

function makeHandle(path: string, info: LockInfo): BenchLock {
  let released = false;
  const onSignal = (signal: NodeJS.Signals): void => {
    release();
    process.kill(process.pid, signal);
  };
  const release = () => {
    if (released) return;
    released = true;
    process.off('exit', release);
    for (const s of ENDING_SIGNALS) process.off(s, onSignal);
    try {
      const now = readLock(path);
      if (now && now.pid === info.pid && now.startedAt === info.startedAt) unlinkSync(path);
    } catch {
      // already gone
    }
  };
  process.on('exit', release);
  for (const s of ENDING_SIGNALS) process.on(s, onSignal);
  return { path, info, release };
}

export interface GpuProcess {
  pid: number;
  processName: string;
  usedMemoryMiB: number;
}

export const NVIDIA_SMI_APPS_QUERY = ['--query-compute-apps=pid,process_name,used_memory', '--format=csv,noheader,nounits'];

/** Parses `nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader[,nounits]`. */
export function parseComputeApps(csv: string): GpuProcess[] {
  return csv
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l.length > 0 && !l.startsWith('No running'))
    .map((line) => {
      const f = line.split(',').map((s) => s.trim());
      const mem = f.at(-1) ?? '';
      return { pid: Number(f[0]), processName: f.slice(1, -1).join(', '), usedMemoryMiB: Number.parseFloat(mem.replace(/\s*MiB$/, '')) };
    });
}

export interface PreflightOptions {
  force?: boolean;
  run?: CommandRunner;
  /** Pids that are ours (the server under test); default: this process. */
  ownPids?: number[];
  /** Other GPU processes are expected (bench serve: the servers under test run there): listed, not refused. */
  expectOthers?: boolean;
}

export interface PreflightResult {
  /** False when nvidia-smi is missing: nothing to check. */
  checked: boolean;
  others: GpuProcess[];
  overridden: boolean;
}

/** Throws when other processes use the GPU, unless forced. */
export function describeGpuProcesses(procs: readonly GpuProcess[]): string {
  return procs.map((p) => `pid ${p.pid} ${p.processName} (${p.usedMemoryMiB} MiB)`).join('; ');
}

export function gpuPreflight(opts: PreflightOptions = {}): PreflightResult {
  const out = (opts.run ?? runCommand)('nvidia-smi', NVIDIA_SMI_APPS_QUERY);
  if (out === null) return { checked: false, others: [], overridden: false };
  const own = new Set(opts.ownPids ?? [process.pid]);
  const others = parseComputeApps(out).filter((p) => !own.has(p.pid));
  if (others.length > 0 && !opts.force && !opts.expectOthers) {
    throw new Error(`the GPU is in use by other processes: ${describeGpuProcesses(others)}. Wait for them, or pass --force to run anyway.`);
  }
  return { checked: true, others, overridden: others.length > 0 };
}
