// Profiling mode: a CUDA event pair around every op, folded into buckets with
// their share of the step. Eager steps record the events op by op. A decode
// step captured as a CUDA graph records them as event-record nodes of the graph
// (cuEventRecordWithFlags(CU_EVENT_RECORD_EXTERNAL) during capture), so each
// replay re-records them and its table describes the replayed graph, not an
// eager imitation of it. "host gaps" is the step's wall time (host clock, from
// the step's start to the sync that ends it) that no op covers: launch and
// packing time, and the GPU waiting on the host.

import { check, CU_EVENT_DEFAULT, CU_EVENT_RECORD_EXTERNAL, outPtr, type DriverApi, type Handle } from './ffi/driver.js';

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

export interface ProfileTable {
  rows: ProfileRow[];
  stepMs: number;
  /** Time covered by ops. */
  gpuMs: number;
}

export interface StepProfile extends ProfileTable {
  /** 'graph': read from the event-record nodes of a replayed CUDA graph; 'eager': recorded op by op. */
  kind: 'eager' | 'graph';
  /** What ran: the graph's key (padded batch size) or the eager step's shape. */
  shape: string;
}

/**
 * Buckets with their share of the step. The step lasts from the first op's start
 * to the last op's end, or `wallMs` when that is longer; what no op covers is
 * charged to "host gaps".
 */
export function profileTable(timings: OpTiming[], wallMs = 0): ProfileTable {
  if (timings.length === 0) return { rows: [], stepMs: 0, gpuMs: 0 };
  const stepStart = Math.min(...timings.map((t) => t.startMs));
  const spanMs = Math.max(...timings.map((t) => t.endMs)) - stepStart;
  const byBucket = new Map<string, ProfileRow>();
  let gpuMs = 0;
  for (const t of timings) {
    const ms = t.endMs - t.startMs;
    gpuMs += ms;
    const row = byBucket.get(t.bucket) ?? { bucket: t.bucket, numCalls: 0, totalMs: 0, share: 0 };
    row.numCalls++;
    row.totalMs += ms;
    byBucket.set(t.bucket, row);
  }
  const stepMs = Math.max(spanMs, wallMs);
  const rows = [...byBucket.values()];
  rows.push({ bucket: 'host gaps', numCalls: 0, totalMs: Math.max(0, stepMs - gpuMs), share: 0 });
  for (const r of rows) r.share = stepMs > 0 ? r.totalMs / stepMs : 0;
  rows.sort((a, b) => b.totalMs - a.totalMs);
  return { rows, stepMs, gpuMs };
}

export function formatProfile(rows: ProfileRow[], stepMs: number, title = 'step'): string {
  const lines = [`${title} ${stepMs.toFixed(3)} ms`,
    `${'bucket'.padEnd(28)} ${'calls'.padStart(6)} ${'ms'.padStart(10)} ${'share'.padStart(7)}`];
  for (const r of rows) {
    lines.push(`${r.bucket.padEnd(28)} ${String(r.numCalls).padStart(6)} ${r.totalMs.toFixed(3).padStart(10)} ` +
      `${(100 * r.share).toFixed(1).padStart(6)}%`);
  }
  return lines.join('\n');
}

interface TimedOp {
  bucket: string;
  start: Handle;
  end: Handle;
}

/** The events a captured graph records on every replay; they live as long as the graph. */
export interface GraphTimings {
  shape: string;
  ops: TimedOp[];
  numReplays: number;
}

/**
 * 'every-step': a table after every profiled step. 'once-per-shape': one table
 * per eager step shape (its first) and per graph (its second replay: the first
 * also uploads the graph to the device).
 */
export type ProfileLogMode = 'every-step' | 'once-per-shape';

const LOGGED_REPLAY = 2;

export class Profiler {
  private readonly pool: Handle[] = [];
  private numUsed = 0;
  private pending: TimedOp[] = [];
  private captured: TimedOp[] | null = null;
  /** time() calls under way (see time). */
  private depth = 0;
  private stepStartMs: number | null = null;
  private stepShape = '';
  private readonly loggedShapes = new Set<string>();
  /** once-per-shape: eager shapes seen once so far, with that step's profile. */
  private readonly onlyStep = new Map<string, StepProfile>();
  last: StepProfile | null = null;

  constructor(private readonly api: DriverApi, private readonly stream: Handle,
    private readonly log: (text: string) => void, private readonly logMode: ProfileLogMode = 'every-step') {}

  private createEvent(): Handle {
    const out: [Handle | null] = [null];
    check(this.api.cuEventCreate(out, CU_EVENT_DEFAULT), 'cuEventCreate');
    return outPtr(out, 'cuEventCreate');
  }

  private event(): Handle {
    if (this.numUsed === this.pool.length) this.pool.push(this.createEvent());
    return this.pool[this.numUsed++]!;
  }

  /** An eager step starts (host clock). */
  startStep(shape: string): void {
    this.stepStartMs = performance.now();
    this.stepShape = shape;
  }

  /**
   * Times fn's launches under `bucket`. A call inside another's fn runs untimed, its launches in the outer bucket: a
   * nested op timed too would count its time twice (session 47's graphed tables had each decode conv twice, timed
   * inside causalConv1d's own bucket).
   */
  time<T>(bucket: string, fn: () => T): T {
    if (this.depth > 0) return fn();
    this.depth++;
    try {
      return this.timeOuter(bucket, fn);
    } finally {
      this.depth--;
    }
  }

  private timeOuter<T>(bucket: string, fn: () => T): T {
    if (this.captured) {
      const op = { bucket, start: this.createEvent(), end: this.createEvent() };
      this.captured.push(op);
      check(this.api.cuEventRecordWithFlags(op.start, this.stream, CU_EVENT_RECORD_EXTERNAL), 'cuEventRecordWithFlags');
      const result = fn();
      check(this.api.cuEventRecordWithFlags(op.end, this.stream, CU_EVENT_RECORD_EXTERNAL), 'cuEventRecordWithFlags');
      return result;
    }
    const start = this.event();
    const end = this.event();
    check(this.api.cuEventRecord(start, this.stream), 'cuEventRecord');
    const result = fn();
    check(this.api.cuEventRecord(end, this.stream), 'cuEventRecord');
    this.pending.push({ bucket, start, end });
    return result;
  }

  /** Ops timed from here to endCapture() become event-record nodes of the graph being captured. */
  beginCapture(): void {
    this.captured = [];
  }

  endCapture(shape: string): GraphTimings {
    const ops = this.captured ?? [];
    this.captured = null;
    return { shape, ops, numReplays: 0 };
  }

  /** Destroys a graph's events (the graph must be gone or idle). */
  release(g: GraphTimings): void {
    for (const op of g.ops) {
      this.api.cuEventDestroy_v2(op.start);
      this.api.cuEventDestroy_v2(op.end);
    }
    g.ops = [];
  }

  get hasPending(): boolean {
    return this.pending.length > 0;
  }

  /** Waits for the eager step's events and folds them into `last`. */
  finishStep(): StepProfile | null {
    if (this.pending.length === 0) return null;
    check(this.api.cuEventSynchronize(this.pending[this.pending.length - 1]!.end), 'cuEventSynchronize');
    const wallMs = this.stepStartMs === null ? 0 : performance.now() - this.stepStartMs;
    const profile = this.fold(this.pending, wallMs, 'eager', this.stepShape);
    this.pending = [];
    this.numUsed = 0;
    this.stepStartMs = null;
    if (this.logMode === 'every-step') {
      this.emit(profile);
    } else if (!this.loggedShapes.has(profile.shape)) {
      // A shape's first step carries one-time costs (module loads, GEMM plans): its second one is printed,
      // and a shape seen only once is printed at dispose(), marked as such.
      const seen = this.onlyStep.has(profile.shape);
      if (seen) {
        this.onlyStep.delete(profile.shape);
        this.emit(profile);
      } else {
        this.onlyStep.set(profile.shape, profile);
      }
    }
    return profile;
  }

  /** After a replay of `g` and its sync, started at `startMs` (host clock): folds its events into `last`. */
  finishReplay(g: GraphTimings, startMs: number): StepProfile | null {
    if (g.ops.length === 0) return null;
    const profile = this.fold(g.ops, performance.now() - startMs, 'graph', g.shape);
    g.numReplays++;
    if (this.logMode === 'every-step' || (g.numReplays >= LOGGED_REPLAY && !this.loggedShapes.has(profile.shape))) {
      this.emit(profile);
    }
    return profile;
  }

  private fold(ops: TimedOp[], wallMs: number, kind: StepProfile['kind'], shape: string): StepProfile {
    const first = ops[0]!.start;
    const ms: [number] = [0];
    const timings: OpTiming[] = ops.map((p) => {
      check(this.api.cuEventElapsedTime_v2(ms, first, p.start), 'cuEventElapsedTime');
      const startMs = ms[0];
      check(this.api.cuEventElapsedTime_v2(ms, first, p.end), 'cuEventElapsedTime');
      return { bucket: p.bucket, startMs, endMs: ms[0] };
    });
    this.last = { ...profileTable(timings, wallMs), kind, shape };
    return this.last;
  }

  private emit(p: StepProfile, note = ''): void {
    this.loggedShapes.add(p.shape);
    const title = p.kind === 'graph' ? `${p.shape} (graph replay, event-record nodes): step` : `${p.shape} (eager${note}): step`;
    this.log(`${formatProfile(p.rows, p.stepMs, title)}\n(GPU ${p.gpuMs.toFixed(3)} ms)`);
  }

  dispose(): void {
    for (const p of this.onlyStep.values()) this.emit(p, ', its only step');
    this.onlyStep.clear();
    for (const e of this.pool) this.api.cuEventDestroy_v2(e);
    this.pool.length = 0;
  }
}
