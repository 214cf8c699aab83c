// EngineClient that runs the EngineCore on the calling thread (offline LLM API,
// tests). Steps run back to back on setImmediate while there is work, so new
// requests and aborts land between steps.

import type { EngineClient } from './client.js';
import type { EngineCore } from './engine-core.js';
import { OutputRouter } from './output-stream.js';
import type { EngineOutput, EngineRequest, EngineStats } from './types.js';

export class InProcessEngineClient implements EngineClient {
  private readonly router = new OutputRouter();
  private looping = false;
  private failure: string | null = null;

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
    this.core.addRequest(req);
    this.kick();
    return stream;
  }

  abort(requestId: string): void {
    this.router.route(this.core.abortRequest(requestId));
  }

  stats(): EngineStats {
    return this.core.stats();
  }

  async shutdown(): Promise<void> {
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
      this.looping = false;
      return;
    }
    try {
      this.router.route(this.core.step());
    } catch (e) {
      this.failure = `engine step failed: ${(e as Error).message}`;
      this.router.failAll(this.failure);
      this.looping = false;
      return;
    }
    setImmediate(() => this.loop());
  }
}
