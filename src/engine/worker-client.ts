// EngineClient whose EngineCore runs in a worker thread: the main thread keeps
// HTTP, tokenization and detokenization; the worker keeps the GPU (or CPU) busy.

import { Worker } from 'node:worker_threads';
import type { EngineClient } from './client.js';
import type { EngineOptions } from './options.js';
import { OutputRouter } from './output-stream.js';
import type { EngineInfo, FromWorker, ToWorker, WorkerInit } from './worker-protocol.js';
import type { EngineOutput, EngineRequest, EngineStats } from './types.js';
import { emptyStats } from './stats.js';

export class WorkerEngineClient implements EngineClient {
  private readonly router = new OutputRouter();
  private latest: EngineStats = emptyStats();
  private failure: string | null = null;
  private closed: Promise<string | null> | null = null;
  private resolveClosed: ((trace: string | null) => void) | null = null;

  private constructor(private readonly worker: Worker, readonly info: EngineInfo) {}

  /** Starts the worker and resolves once the model is loaded (rejects with the load error). */
  static start(options: EngineOptions): Promise<WorkerEngineClient> {
    const init: WorkerInit = { options };
    const worker = new Worker(new URL('./worker-main.js', import.meta.url), { workerData: init });
    return new Promise((resolve, reject) => {
      let client: WorkerEngineClient | null = null;
      worker.on('message', (m: FromWorker) => {
        if (m.type === 'ready') {
          client = new WorkerEngineClient(worker, m.info);
          client.latest = m.stats;
          resolve(client);
        } else if (!client) {
          if (m.type === 'failed') reject(new Error(m.message));
        } else {
          client.onMessage(m);
        }
      });
      worker.on('error', (e: Error) => (client ? client.fail(e.message) : reject(e)));
      worker.on('exit', (code) => {
        if (!client) reject(new Error(`engine worker exited with code ${code} before it was ready`));
        else if (!client.closed) client.fail(`engine worker exited with code ${code}`);
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
        this.router.route(m.outputs);
        break;
      case 'stats':
        this.latest = m.stats;
        break;
      case 'failed':
        this.fail(m.message);
        break;
      case 'closed':
        this.resolveClosed?.(m.traceSummary);
        break;
      case 'ready':
        break;
    }
  }

  private fail(message: string): void {
    this.failure ??= message;
    this.router.failAll(message);
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
      this.post({ type: 'shutdown' });
      void this.closed.then(() => this.worker.terminate());
    }
    return this.closed;
  }
}
