// Profiling mode: a CUDA event pair around every op of an eager step, folded
// into buckets with their share of the step's GPU time. "host gaps" is the time
// between the first op's start and the last op's end that no op covers: the GPU
// waiting on the host.

import { check, CU_EVENT_DEFAULT, outPtr, type DriverApi, type Handle } from './ffi/driver.js';

export interface ProfileRow {
  bucket: string;
  numCalls: number;
  totalMs: number;
  share: number;
}

export interface OpTiming {
  bucket: string;
  startMs: number;
  endMs: number;
}

/** Buckets with their share of the step; `timings` are ms relative to the step's first event. */
export function profileTable(timings: OpTiming[]): { rows: ProfileRow[]; stepMs: number } {
  if (timings.length === 0) return { rows: [], stepMs: 0 };
  const stepStart = Math.min(...timings.map((t) => t.startMs));
  const stepMs = Math.max(...timings.map((t) => t.endMs)) - stepStart;
  const byBucket = new Map<string, ProfileRow>();
  let busyMs = 0;
  for (const t of timings) {
    const ms = t.endMs - t.startMs;
    busyMs += ms;
    const row = byBucket.get(t.bucket) ?? { bucket: t.bucket, numCalls: 0, totalMs: 0, share: 0 };
    row.numCalls++;
    row.totalMs += ms;
    byBucket.set(t.bucket, row);
  }
  const rows = [...byBucket.values()];
  rows.push({ bucket: 'host gaps', numCalls: 0, totalMs: Math.max(0, stepMs - busyMs), share: 0 });
  for (const r of rows) r.share = stepMs > 0 ? r.totalMs / stepMs : 0;
  rows.sort((a, b) => b.totalMs - a.totalMs);
  return { rows, stepMs };
}

export function formatProfile(rows: ProfileRow[], stepMs: number): string {
  const lines = [`step ${stepMs.toFixed(3)} ms`, `${'bucket'.padEnd(28)} ${'calls'.padStart(6)} ${'ms'.padStart(10)} ${'share'.padStart(7)}`];
  for (const r of rows) {
    lines.push(`${r.bucket.padEnd(28)} ${String(r.numCalls).padStart(6)} ${r.totalMs.toFixed(3).padStart(10)} ` +
      `${(100 * r.share).toFixed(1).padStart(6)}%`);
  }
  return lines.join('\n');
}

interface Pending {
  bucket: string;
  start: Handle;
  end: Handle;
}

export class Profiler {
  private readonly pool: Handle[] = [];
  private numUsed = 0;
  private pending: Pending[] = [];
  last: { rows: ProfileRow[]; stepMs: number } | null = null;

  constructor(private readonly api: DriverApi, private readonly stream: Handle) {}

  private event(): Handle {
    if (this.numUsed === this.pool.length) {
      const out: [Handle | null] = [null];
      check(this.api.cuEventCreate(out, CU_EVENT_DEFAULT), 'cuEventCreate');
      this.pool.push(outPtr(out, 'cuEventCreate'));
    }
    return this.pool[this.numUsed++]!;
  }

  time<T>(bucket: string, fn: () => T): T {
    const start = this.event();
    const end = this.event();
    check(this.api.cuEventRecord(start, this.stream), 'cuEventRecord');
    const result = fn();
    check(this.api.cuEventRecord(end, this.stream), 'cuEventRecord');
    this.pending.push({ bucket, start, end });
    return result;
  }

  get hasPending(): boolean {
    return this.pending.length > 0;
  }

  /** Waits for the step's events and folds them into `last`; returns the formatted table. */
  finishStep(): string {
    if (this.pending.length === 0) return '';
    const first = this.pending[0]!.start;
    check(this.api.cuEventSynchronize(this.pending[this.pending.length - 1]!.end), 'cuEventSynchronize');
    const ms: [number] = [0];
    const timings: OpTiming[] = this.pending.map((p) => {
      check(this.api.cuEventElapsedTime_v2(ms, first, p.start), 'cuEventElapsedTime');
      const startMs = ms[0];
      check(this.api.cuEventElapsedTime_v2(ms, first, p.end), 'cuEventElapsedTime');
      return { bucket: p.bucket, startMs, endMs: ms[0] };
    });
    this.pending = [];
    this.numUsed = 0;
    this.last = profileTable(timings);
    return formatProfile(this.last.rows, this.last.stepMs);
  }

  dispose(): void {
    for (const e of this.pool) this.api.cuEventDestroy_v2(e);
    this.pool.length = 0;
  }
}
