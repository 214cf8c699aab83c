// CUDA graphs of decode steps, one per batch-size bucket and kv-length class (decode-splits.ts graphKey). A
// graph names its buffers by address, so it is valid only while every buffer generation it was captured with is.

import { BYTES_PER_ELEMENT } from '../../loader/dtype.js';
import type { ForwardBatch } from '../batch.js';
import type { DeviceGraphs } from '../backend.js';
import type { CudaAttention } from './attention-ops.js';
import { graphKey, GRAPH_KV_CLASSES, SHORT_GRAPH_KV, SHORT_GRAPH_SPLITS, shortGraphRows } from './decode-splits.js';
import { check } from './ffi/driver.js';
import { GraphCache } from './graph-cache.js';
import { bf16BytesToF32 } from './host-staging.js';
import type { KvMemory } from './kv-memory.js';
import type { CudaSampling } from './sampling.js';
import { hasUniformRows, type StepContext } from './step-context.js';
import { layoutFor, packStep, stepLayout } from './step-meta.js';

export class CudaGraphs implements DeviceGraphs {
  private readonly cache: GraphCache;
  numCaptures = 0;
  /** Wall time of the steps that captured a graph (their eager run, the capture and the instantiation). */
  captureMs = 0;
  numReplays = 0;

  constructor(private readonly s: StepContext, private readonly kv: KvMemory, private readonly attention: CudaAttention,
    private readonly sampling: CudaSampling, private readonly enforceEager: boolean) {
    this.cache = new GraphCache(s.device.api, s.device.stream, s.profiler);
  }

  private generation(): string {
    return `${this.s.generation()}:${this.kv.generation}`;
  }

  /**
   * Runs a step of uniform rows `record` (a forward pass over `batch` that calls beginStep and ends in one toHost or
   * sampleTokens; a decode step, or a verify step of k + 1 tokens a row) through a CUDA graph cached under `key`
   * (the caller's: the padded batch size, the row length and what the step returns). The first call for a key runs eagerly, then captures; later
   * calls stage the batch's metadata into the pinned buffer the graph copies
   * from, launch the graph and read its result. Returns what toHost returned.
   */
  run<R extends Float32Array | Int32Array>(key: number, batch: ForwardBatch, record: () => R): R {
    if (this.enforceEager || !hasUniformRows(batch)) return record();
    const launched = this.launch(key, batch);
    if (launched) return launched() as R;
    const short = shortGraphRows(batch.positions);
    this.cache.destroy(graphKey(key, short));
    const t0 = performance.now();
    const result = record();
    this.s.device.synchronize();
    this.s.workspace.reset();
    this.attention.captureSplits = short ? SHORT_GRAPH_SPLITS : Infinity;  // long rows: as many as the launch's cap
    this.capture(graphKey(key, short), record,
      `graph ${key}${!short && GRAPH_KV_CLASSES ? `, kv over ${SHORT_GRAPH_KV}` : ''}`);
    this.numCaptures++;
    this.captureMs += performance.now() - t0;
    return result;
  }

  /**
   * Launches the graph captured under `key` for `batch` without waiting for it;
   * returns the function that waits and reads its result (call it before the
   * next step), or null when no valid graph is cached (use run()).
   */
  launch(key: number, batch: ForwardBatch): (() => Float32Array | Int32Array) | null {
    if (this.enforceEager || !hasUniformRows(batch)) return null;
    const s = this.s;
    const g = this.cache.get(graphKey(key, shortGraphRows(batch.positions)));
    if (!g || g.generation !== this.generation() || !g.hostRead ||
      layoutFor(batch, s.steps.meta?.layout ?? null) !== s.steps.meta?.layout) return null;
    const meta = s.steps.meta!;
    const api = s.device.api;
    if (s.metaCopyPending) check(api.cuEventSynchronize(s.metaCopied), 'cuEventSynchronize');
    const startMs = performance.now();
    const layout = stepLayout(batch, meta.layout);  // the capture's: its batch was padded to this bucket too
    s.current = { batch, packed: packStep(batch, layout, meta.words), layout };
    check(api.cuGraphLaunch(g.exec, s.device.stream), 'cuGraphLaunch');
    s.metaCopyPending = true;  // the graph records metaCopied after its copy of the packed step
    this.numReplays++;
    const read = g.hostRead;
    if (read.numElements === 0) {
      // a pipeline stage before the last: its step ends with the send to the next stage, and nothing comes back. The
      // next launch waits for this one's metadata copy (metaCopied) before it reuses the pinned buffer.
      if (!g.timings) return () => new Int32Array(0);
      return () => {
        s.device.synchronize();
        s.profiler?.finishReplay(g.timings!, startMs);
        s.metaCopyPending = false;
        return new Int32Array(0);
      };
    }
    if (read.src !== undefined) {
      // tokens: one of two slots and its own event, so this step's wait does not wait for a step launched after it
      return this.sampling.readTokensLater(read.src, read.numElements, () => {
        if (g.timings) s.profiler?.finishReplay(g.timings, startMs);
      });
    }
    return () => {
      const bytes = read.numElements * (read.dtype === 'i32' ? 4 : BYTES_PER_ELEMENT[read.dtype]);
      const view = s.staging.ensure(bytes, true).view;
      s.device.synchronize();
      if (g.timings) s.profiler?.finishReplay(g.timings, startMs);
      s.metaCopyPending = false;
      if (read.dtype === 'i32') return new Int32Array(view.slice(0, bytes));
      return read.dtype === 'bf16' ? bf16BytesToF32(view, read.numElements) : new Float32Array(view.slice(0, bytes));
    };
  }

  private capture(key: number, record: () => Float32Array | Int32Array, label: string): void {
    this.cache.capture(key, this.generation(), () => {
      this.sampling.capturedRead = null;
      this.s.capturing = true;
      this.s.workspace.frozen = true;
      try {
        record();
      } finally {
        this.s.capturing = false;
        this.s.workspace.frozen = false;
      }
      // none: a pipeline stage's forward before the last ends with its send (Model.forward*), and reads nothing back
      return this.sampling.capturedRead ?? { numElements: 0, dtype: 'i32' };
    }, label);
  }

  get size(): number {
    return this.cache.size;
  }

  dispose(): void {
    this.cache.dispose();
  }
}
