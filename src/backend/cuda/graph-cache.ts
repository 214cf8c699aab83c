// Captured CUDA graphs by key (the backend's decode steps per batch-size bucket): capture of a step recorded on the
// backend's stream, instantiation, and destruction. What a graph's step reads back, and when a graph is still
// valid, are the backend's (cuda-backend.ts graph(), graphLaunch()).

import { check, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL, type DriverApi, outPtr, type Handle } from './ffi/driver.js';
import type { GraphTimings, Profiler } from './profiler.js';

/** What a captured step hands the host: logits or tokens; with src, sampled tokens copied out after the graph. */
export type HostRead = { numElements: number; dtype: 'bf16' | 'f32' | 'i32'; src?: bigint } | null;

export interface CapturedGraph {
  /** Profile mode: the events the graph records between its ops. */
  timings: GraphTimings | null;
  exec: Handle;
  graph: Handle;
  /** The backend's buffer generations when it was captured (a graph names buffers by address). */
  generation: string;
  hostRead: HostRead;
}

export class GraphCache {
  private readonly graphs = new Map<number, CapturedGraph>();

  constructor(private readonly api: DriverApi, private readonly stream: Handle, private readonly profiler: Profiler | null) {}

  get(key: number): CapturedGraph | undefined {
    return this.graphs.get(key);
  }

  get size(): number {
    return this.graphs.size;
  }

  /**
   * Captures what `record` launches on the stream as the graph for `key` (replacing any), instantiated, its profile
   * tables titled `label`. `record` returns what the step reads back. A throw ends the capture, frees what it made and propagates.
   */
  capture(key: number, generation: string, record: () => HostRead, label = `graph ${key}`): void {
    const api = this.api;
    this.destroy(key);
    check(api.cuStreamBeginCapture_v2(this.stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL), 'cuStreamBeginCapture_v2');
    this.profiler?.beginCapture();
    const graphOut: [Handle | null] = [null];
    let failure: unknown = null;
    let hostRead: HostRead = null;
    try {
      hostRead = record();
    } catch (err) {
      failure = err;
    }
    const timings = this.profiler?.endCapture(label) ?? null;
    const endStatus = api.cuStreamEndCapture(this.stream, graphOut);
    if (failure) {
      if (endStatus === 0 && graphOut[0]) api.cuGraphDestroy(BigInt(graphOut[0]));
      if (timings) this.profiler?.release(timings);
      throw failure;
    }
    check(endStatus, 'cuStreamEndCapture');
    const graph = outPtr(graphOut, 'cuStreamEndCapture');
    const execOut: [Handle | null] = [null];
    check(api.cuGraphInstantiateWithFlags(execOut, graph, 0n), 'cuGraphInstantiateWithFlags');
    this.graphs.set(key, { timings, exec: outPtr(execOut, 'cuGraphInstantiateWithFlags'), graph, generation, hostRead });
  }

  destroy(key: number): void {
    const g = this.graphs.get(key);
    if (!g) return;
    this.api.cuGraphExecDestroy(g.exec);
    this.api.cuGraphDestroy(g.graph);
    if (g.timings) this.profiler?.release(g.timings);
    this.graphs.delete(key);
  }

  dispose(): void {
    for (const key of [...this.graphs.keys()]) this.destroy(key);
  }
}
