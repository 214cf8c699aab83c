// EngineClient whose EngineCore runs in a worker thread: the main thread keeps
// HTTP, tokenization and detokenization; the worker keeps the GPU (or CPU) busy.

import { Worker } from 'node:worker_threads';
import type { EngineClient } from './client.js';
import type { EngineOptions } from './options.js';
import { OutputRouter } from './output-stream.js';
import type { EngineInfo, FromWorker, ProbeKind, ToWorker, WorkerInit } from './worker-protocol.js';
import type { EngineOutput, EngineRequest, EngineStats } from './types.js';
import { emptyStats } from './stats.js';

export class WorkerEngineClient implements EngineClient {
  private readonly router = new OutputRouter();
  private latest: EngineStats = emptyStats();
  private failure: string | null = null;
  private closed: Promise<string | null> | null = null;
  /** The worker is gone (a crash, or after shutdown): a shutdown then has nothing to wait for. */
  private exited = false;
  private resolveClosed: ((trace: string | null) => void) | null = null;
  /** Probes asked and not yet answered, in order (the worker answers in order). */
  private readonly probes: { what: ProbeKind; resolve: (v: number | null) => void }[] = [];
  /**
   * Sees every batch of outputs as it arrives, before the streams get it (the data-parallel client counts each
   * replica's requests by it, whether or not their consumers read on).
   */
  onOutputs: ((outputs: readonly EngineOutput[]) => void) | null = null;
  /** Called once, when the engine fails (a 'failed' message, a worker error or exit). */
  onFailure: ((message: string) => void) | null = null;

  private constructor(private readonly worker: Worker, readonly info: EngineInfo, private readonly label: string | null) {}

  /**
   * Starts the worker and resolves once the model is loaded (rejects with the load error). `label` names the engine
   * in the messages of its failures (a data-parallel replica's: "data-parallel replica 1 failed: ...").
   */
  static start(options: EngineOptions, label: string | null = null): Promise<WorkerEngineClient> {
    const init: WorkerInit = { options };
    const worker = new Worker(new URL('./worker-main.js', import.meta.url), { workerData: init });
    return new Promise((resolve, reject) => {
      let client: WorkerEngineClient | null = null;
      worker.on('message', (m: FromWorker) => {
        if (m.type === 'ready') {
          client = new WorkerEngineClient(worker, m.info, label);
          client.latest = m.stats;
          resolve(client);
        } else if (!client) {
          if (m.type === 'failed') reject(new Error(m.message));
        } else {
          client.onMessage(m);
        }
      });
      worker.on('error', (e: Error) => (client ? client.failInWorker(e.message) : reject(e)));
      worker.on('exit', (code) => {
        if (client) client.exited = true;
        if (!client) reject(new Error(`engine worker exited with code ${code} before it was ready`));
        else if (!client.closed) client.failInWorker(`engine worker exited with code ${code}`);
        client?.resolveClosed?.(null);
      });
    });
  }

  /** Set when the engine failed; the API then reports 503. */
  get error(): string | null {
    return this.failure;
  }

  private onMessage(m: FromWorker): void {
    switch (m.type) {
      case 'outputs':
        this.latest = m.stats;
        this.onOutputs?.(m.outputs);
        this.router.route(m.outputs);
        break;
      case 'probe': {
        const i = this.probes.findIndex((p) => p.what === m.what);
        if (i >= 0) this.probes.splice(i, 1)[0]!.resolve(m.value);
        break;
      }
      case 'stats':
        this.latest = m.stats;
        break;
      case 'failed':
        this.failInWorker(m.message);
        break;
      case 'closed':
        this.resolveClosed?.(m.traceSummary);
        break;
      case 'ready':
        break;
    }
  }

  /** The engine itself failed: the message says which engine, where it has a label. */
  private failInWorker(message: string): void {
    this.fail(this.label === null ? message : `${this.label} failed: ${message}`);
  }

  /** Ends every request in flight with `message` and refuses new ones (the engine failed, or a peer replica did). */
  fail(message: string): void {
    const first = this.failure === null;
    this.failure ??= message;
    this.router.failAll(message);
    for (const p of this.probes.splice(0)) p.resolve(null);
    if (first) this.onFailure?.(message);
  }

  /** The device's copy bandwidth or GEMM peak, measured in the worker (EngineCore.copyBandwidth / gemmPeak). */
  probe(what: ProbeKind): Promise<number | null> {
    if (this.failure || this.closed) return Promise.resolve(null);
    return new Promise((resolve) => {
      this.probes.push({ what, resolve });
      this.post({ type: 'probe', what });
    });
  }

  private post(m: ToWorker): void {
    this.worker.postMessage(m);
  }

  generate(req: EngineRequest): AsyncIterable<EngineOutput> {
    const stream = this.router.open(req.requestId);
    if (this.failure) this.router.failAll(this.failure);
    else this.post({ type: 'add', req });
    return stream;
  }

  abort(requestId: string): void {
    if (!this.failure) this.post({ type: 'abort', requestId });
  }

  stats(): EngineStats {
    return this.latest;
  }

  /** Stops the loop; resolves with the admission trace summary when one was recorded. */
  shutdown(): Promise<void> {
    return this.shutdownWithTrace().then(() => undefined);
  }

  shutdownWithTrace(): Promise<string | null> {
    if (!this.closed) {
      this.closed = new Promise((r) => (this.resolveClosed = r));
      if (this.exited) this.resolveClosed?.(null);
      else this.post({ type: 'shutdown' });
      // a request still in flight ends (with an error) rather than waiting forever on a stopped engine
      void this.closed.then(() => {
        this.router.failAll('engine shut down');
        for (const p of this.probes.splice(0)) p.resolve(null);
        return this.worker.terminate();
      });
    }
    return this.closed;
  }
}
