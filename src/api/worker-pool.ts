// The server's worker pool: the work a request brings that could hold the event loop (or the engine) for long, or
// trap, runs here in worker threads, each task under a time limit. A task over its limit ends its worker
// (terminate) and a fresh one takes its place; so does a worker whose xgrammar instance trapped, so no later
// request meets a corrupted instance or its memory. Workers start on first use.

import { Worker } from 'node:worker_threads';
import type { ChatMessage } from '../loader/types.js';
import type { RenderChatOptions } from '../loader/chat-template.js';
import type { StructuredOutputSpec } from '../sampling/structured-output.js';

/** Where a worker reads the model's vocabulary, to compile grammars as the engine will. */
export interface PoolGrammarVocab {
  tokenizerJsonPath: string;
  vocabSize: number;
  stopTokenIds: number[];
}

export interface PoolWorkerData {
  /** null: grammars are checked without a vocabulary. */
  grammarVocab: PoolGrammarVocab | null;
}

export type PoolTask =
  | { kind: 'grammar'; spec: StructuredOutputSpec }
  | { kind: 'template'; template: string; messages: ChatMessage[]; options: RenderChatOptions };

/**
 * A task's end. `reason`: the input's fault, said by the compiler or the template; null: a server error, whose
 * details stay in the worker. `trapped`: the worker's instance is spent (it is replaced).
 */
export type TaskResult = { ok: true; text?: string } | { ok: false; reason: string | null; trapped: boolean };

export type PoolWorkerMessage =
  | { type: 'ready' }
  | { type: 'broken'; message: string }
  | { type: 'done'; id: number; result: TaskResult };

/** A task ran past its time limit (its worker was ended). */
export class PoolTimeoutError extends Error {
  constructor(readonly timeoutMs: number) {
    super(`the task ran past its limit of ${timeoutMs} ms`);
    this.name = 'PoolTimeoutError';
  }
}

/** The worker died under the task (out of memory, a crash), or the pool closed. */
export class PoolWorkerError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'PoolWorkerError';
  }
}

/** The pool closed (the server is shutting down) before the task ended. */
export class PoolClosedError extends PoolWorkerError {
  constructor() {
    super('the worker pool is closed');
    this.name = 'PoolClosedError';
  }
}

interface Queued {
  task: PoolTask;
  timeoutMs: number;
  resolve(r: TaskResult): void;
  reject(e: Error): void;
}

interface Slot {
  worker: Worker;
  ready: boolean;
  current: (Queued & { id: number; timer: NodeJS.Timeout }) | null;
}

export interface WorkerPoolOptions {
  size: number;
  grammarVocab: PoolGrammarVocab | null;
  /** Heap of each worker, MiB (a task that needs more ends its worker, not the server). */
  maxHeapMb?: number;
}

export class WorkerPool {
  private readonly slots: Slot[] = [];
  private readonly queue: Queued[] = [];
  private nextId = 1;
  private closed = false;
  private broken: string | null = null;
  /** Workers replaced after a time limit, a trap or a crash. */
  numReplaced = 0;

  constructor(private readonly o: WorkerPoolOptions) {
    if (!Number.isInteger(o.size) || o.size < 1) throw new Error('the worker pool needs at least one worker');
  }

  /** Runs a task in a worker; rejects with PoolTimeoutError past `timeoutMs`, PoolWorkerError when its worker died. */
  run(task: PoolTask, timeoutMs: number): Promise<TaskResult> {
    if (this.closed) return Promise.reject(new PoolClosedError());
    if (this.broken !== null) return Promise.reject(new PoolWorkerError(this.broken));
    return new Promise((resolve, reject) => {
      this.queue.push({ task, timeoutMs, resolve, reject });
      const numFree = this.slots.filter((s) => s.current === null).length;
      if (numFree < this.queue.length && this.slots.length < this.o.size) this.spawn();
      this.dispatch();
    });
  }

  /** Ends every worker (a task in flight is rejected). */
  async close(): Promise<void> {
    this.closed = true;
    for (const q of this.queue.splice(0)) q.reject(new PoolClosedError());
    await Promise.all(this.slots.splice(0).map((s) => this.end(s, new PoolClosedError())));
  }

  get numWorkers(): number {
    return this.slots.length;
  }

  private spawn(): void {
    const data: PoolWorkerData = { grammarVocab: this.o.grammarVocab };
    const worker = new Worker(new URL('./pool-worker.js', import.meta.url), {
      workerData: data,
      resourceLimits: { maxOldGenerationSizeMb: this.o.maxHeapMb ?? 512, stackSizeMb: 8 },
      stdout: false, stderr: false,
    });
    worker.unref();
    const slot: Slot = { worker, ready: false, current: null };
    this.slots.push(slot);
    worker.on('message', (m: PoolWorkerMessage) => this.onMessage(slot, m));
    worker.on('error', (e: Error) => this.replace(slot, new PoolWorkerError(`a pool worker failed: ${e.message}`)));
    worker.on('exit', () => this.replace(slot, new PoolWorkerError('a pool worker exited')));
  }

  private onMessage(slot: Slot, m: PoolWorkerMessage): void {
    if (m.type === 'ready') {
      slot.ready = true;
      this.dispatch();
    } else if (m.type === 'broken') {
      this.broken = `the worker pool cannot start: ${m.message}`;
      for (const q of this.queue.splice(0)) q.reject(new PoolWorkerError(this.broken));
      void this.end(slot, new PoolWorkerError(this.broken));
    } else {
      const c = slot.current;
      if (c === null || c.id !== m.id) return;
      clearTimeout(c.timer);
      slot.current = null;
      c.resolve(m.result);
      if (!m.result.ok && m.result.trapped) this.replace(slot, null);
      else this.dispatch();
    }
  }

  private dispatch(): void {
    for (const slot of this.slots) {
      if (this.queue.length === 0) return;
      if (!slot.ready || slot.current !== null) continue;
      const q = this.queue.shift()!;
      const id = this.nextId++;
      const timer = setTimeout(() => {
        if (slot.current?.id !== id) return;
        this.replace(slot, new PoolTimeoutError(q.timeoutMs));
      }, q.timeoutMs);
      slot.current = { ...q, id, timer };
      slot.worker.postMessage({ id, task: q.task });
    }
  }

  /** Ends a slot's worker (rejecting its task with `reason`) and starts another while there is work. */
  private replace(slot: Slot, reason: Error | null): void {
    const at = this.slots.indexOf(slot);
    if (at < 0) return;
    this.slots.splice(at, 1);
    this.numReplaced++;
    void this.end(slot, reason ?? new PoolWorkerError('replaced'));
    if (!this.closed && this.broken === null && (this.queue.length > 0 || this.slots.length === 0)) this.spawn();
  }

  private async end(slot: Slot, reason: Error): Promise<void> {
    const c = slot.current;
    slot.current = null;
    if (c !== null) {
      clearTimeout(c.timer);
      c.reject(reason);
    }
    slot.worker.removeAllListeners('exit');
    slot.worker.removeAllListeners('error');
    slot.worker.on('error', () => {});
    await slot.worker.terminate();
  }
}
