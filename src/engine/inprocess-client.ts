// EngineClient that runs the EngineCore on the calling thread (offline LLM API,
// tests). Steps run back to back on setImmediate while there is work, so new
// requests and aborts land between steps. A step's outputs are delivered while
// the next step runs on the device (consumers' work overlaps the GPU); requests
// added or aborted meanwhile are applied once that step completes.

import type { EngineClient } from './client.js';
import type { EngineCore, PendingStep } from './engine-core.js';
import { OutputRouter } from './output-stream.js';
import type { EngineOutput, EngineRequest, EngineStats } from './types.js';

export class InProcessEngineClient implements EngineClient {
  private readonly router = new OutputRouter();
  private looping = false;
  private failure: string | null = null;
  /** Outputs of the last completed step, delivered once the next step is launched. */
  private held: EngineOutput[] | null = null;
  private inFlight = false;
  private closed = false;
  private readonly deferred: (() => void)[] = [];

  constructor(readonly core: EngineCore) {}

  get error(): string | null {
    return this.failure;
  }

  generate(req: EngineRequest): AsyncIterable<EngineOutput> {
    const stream = this.router.open(req.requestId);
    if (this.failure) {
      this.router.failAll(this.failure);
      return stream;
    }
    this.whenIdle(() => {
      this.core.addRequest(req);
      this.kick();
    });
    return stream;
  }

  abort(requestId: string): void {
    this.whenIdle(() => this.router.route(this.core.abortRequest(requestId)));
  }

  private whenIdle(fn: () => void): void {
    if (this.inFlight) this.deferred.push(fn);
    else fn();
  }

  stats(): EngineStats {
    return this.core.stats();
  }

  async shutdown(): Promise<void> {
    this.closed = true;
    this.router.failAll('engine shut down');
    this.core.dispose();
  }

  private kick(): void {
    if (this.looping) return;
    this.looping = true;
    setImmediate(() => this.loop());
  }

  private loop(): void {
    if (!this.core.hasWork() || this.failure) {
      this.deliverHeld();
      this.looping = false;
      return;
    }
    let pending: PendingStep;
    try {
      pending = this.core.beginStep();
    } catch (e) {
      this.fail(e);
      return;
    }
    this.inFlight = true;
    this.deliverHeld();
    // consumers of those outputs run (microtasks) before this completes the step
    setImmediate(() => {
      if (this.closed) return;
      try {
        this.held = this.core.completeStep(pending);
      } catch (e) {
        this.inFlight = false;
        this.fail(e);
        return;
      }
      this.inFlight = false;
      for (const fn of this.deferred.splice(0)) fn();
      setImmediate(() => this.loop());
    });
  }

  private deliverHeld(): void {
    const outputs = this.held;
    this.held = null;
    if (outputs && outputs.length > 0) this.router.route(outputs);
  }

  private fail(e: unknown): void {
    this.deliverHeld();
    this.failure = `engine step failed: ${(e as Error).message}`;
    this.router.failAll(this.failure);
    this.looping = false;
  }
}
