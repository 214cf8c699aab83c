// Splits a matmul's output columns across worker threads that share the operands
// through SharedArrayBuffers: every thread (the caller too) claims chunks of
// columns from one atomic counter, so a thread slowed by a busy machine takes
// fewer. The caller blocks (Atomics.wait) until every worker is done, so the
// Backend stays synchronous. A column's arithmetic is the same whichever thread
// computes it, so the split never changes a bit.

import { MessageChannel, Worker, type MessagePort } from 'node:worker_threads';
import type { SharedView } from './heap.js';
import type { AttentionJob } from './attention-wasm.js';
import { CONTROL, jobOf, makeKernel, runAttentionUnits, runChunks, type KernelSetup, type MatmulKernel,
  type PoolMessage } from './pool-protocol.js';
import type { WasmMemory } from './wasm-asm.js';
import type { WasmAttention } from './wasm-attention.js';

/** Below this many multiply-adds a matmul runs on the calling thread alone. */
const MIN_PARALLEL_MACS = 1 << 18;
const COLUMN_ALIGN = 8;
/** Chunks per thread: small enough that a descheduled thread holds up little. */
const CHUNKS_PER_THREAD = 8;

export class MatmulPool {
  readonly numThreads: number;
  private readonly control = new Int32Array(new SharedArrayBuffer(CONTROL.length * 4));
  private readonly workers: Worker[] = [];
  private readonly ports: MessagePort[] = [];
  private readonly errors: string[] = [];
  private readonly buffers = new Map<number, Float32Array>();
  private readonly kernel: MatmulKernel;

  constructor(numThreads: number, setup: KernelSetup) {
    this.numThreads = Math.max(1, Math.floor(numThreads));
    this.kernel = makeKernel(setup, this.buffers);
    for (let i = 1; i < this.numThreads; i++) {
      const { port1, port2 } = new MessageChannel();
      const worker = new Worker(new URL('./matmul-worker.js', import.meta.url), {
        workerData: { control: this.control.buffer, port: port2, setup, threadIndex: i },
        transferList: [port2],
      });
      worker.on('message', (m: string) => this.errors.push(m));
      worker.on('error', (e) => this.errors.push(String(e)));
      worker.unref();
      this.workers.push(worker);
      this.ports.push(port1);
    }
  }

  register(id: number, buffer: SharedArrayBuffer): void {
    this.buffers.set(id, new Float32Array(buffer));
    this.post({ kind: 'buffer', id, buffer });
  }

  release(id: number): void {
    this.buffers.delete(id);
    this.post({ kind: 'release', id });
  }

  /** y[T, N] = x[T, K] * w[N, K]^T */
  matmul(x: SharedView, w: SharedView, y: SharedView, T: number, K: number, N: number, wBf16 = false): void {
    const numWorkers = T * K * N < MIN_PARALLEL_MACS ? 0 : Math.min(this.workers.length,
      Math.ceil(N / COLUMN_ALIGN) - 1);
    if (numWorkers <= 0) {
      this.kernel(jobOf(x, w, y, T, K, N, N, wBf16), 0, N);
      return;
    }
    const colsPerChunk = Math.ceil(N / ((numWorkers + 1) * CHUNKS_PER_THREAD) / COLUMN_ALIGN) * COLUMN_ALIGN;
    const job = jobOf(x, w, y, T, K, N, colsPerChunk, wBf16);
    Atomics.store(this.control, CONTROL.numDone, 0);
    Atomics.store(this.control, CONTROL.nextChunk, 0);
    for (let p = 0; p < numWorkers; p++) this.ports[p]!.postMessage({ kind: 'matmul', ...job } satisfies PoolMessage);
    Atomics.add(this.control, CONTROL.generation, 1);
    Atomics.notify(this.control, CONTROL.generation);
    runChunks(this.control, this.kernel, job);
    this.waitDone(numWorkers);
  }

  /** Runs numUnits attention units over the calling thread (index 0) and the workers. */
  attention(kernels: WasmAttention, memory: WasmMemory, job: AttentionJob, numUnits: number, parallel: boolean): void {
    const numWorkers = parallel ? Math.min(this.workers.length, numUnits - 1) : 0;
    Atomics.store(this.control, CONTROL.numDone, 0);
    Atomics.store(this.control, CONTROL.nextChunk, 0);
    if (numWorkers > 0) {
      for (let p = 0; p < numWorkers; p++) {
        this.ports[p]!.postMessage({ kind: 'attention', numUnits, ...job } satisfies PoolMessage);
      }
      Atomics.add(this.control, CONTROL.generation, 1);
      Atomics.notify(this.control, CONTROL.generation);
    }
    runAttentionUnits(this.control, kernels, memory, job, numUnits, 0);
    if (numWorkers > 0) this.waitDone(numWorkers);
  }

  dispose(): void {
    Atomics.store(this.control, CONTROL.stop, 1);
    Atomics.add(this.control, CONTROL.generation, 1);
    Atomics.notify(this.control, CONTROL.generation);
    for (const port of this.ports) port.close();
    for (const worker of this.workers) void worker.terminate();
    this.workers.length = 0;
    this.ports.length = 0;
  }

  private post(msg: PoolMessage): void {
    for (const port of this.ports) port.postMessage(msg);
  }

  private waitDone(numPosted: number): void {
    for (;;) {
      const numDone = Atomics.load(this.control, CONTROL.numDone);
      if (numDone >= numPosted) break;
      Atomics.wait(this.control, CONTROL.numDone, numDone, 1000);
    }
    if (Atomics.load(this.control, CONTROL.failed) !== 0) {
      throw new Error(`matmul worker failed: ${this.errors.join('; ') || 'unknown error'}`);
    }
  }
}
