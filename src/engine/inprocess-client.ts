// EngineClient that runs the EngineCore on the calling thread (offline LLM API,
// tests). Steps run back to back on setImmediate while there is work
// (EngineCore.advance: launch the next step, complete the previous one), so a
// step's outputs are delivered while the next step runs on the device
// (consumers' work overlaps the GPU), and new requests and aborts land between
// turns.

import type { EngineClient } from './client.js';
import type { EngineCore } from './engine-core.js';
import { OutputRouter } from './output-stream.js';
import type { EngineOutput, EngineRequest, EngineStats } from './types.js';

export class InProcessEngineClient implements EngineClient {
  private readonly router = new OutputRouter();
  private looping = false;
  private failure: string | null = null;
  private closed = false;

  constructor(readonly core: EngineCore) {
    core.onWork = () => this.kick();
  }

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
    this.closed = true;
    this.router.failAll('engine shut down');
    await this.core.close();
  }

  private kick(): void {
    if (this.looping) return;
    this.looping = true;
    setImmediate(() => this.loop());
  }

  /** One turn; the outputs' consumers (microtasks) run before the next turn, while the launched step runs. */
  private loop(): void {
    if (this.closed) return;
    if (!this.core.hasWork() || this.failure) {
      this.looping = false;
      return;
    }
    let outputs: EngineOutput[];
    try {
      outputs = this.core.advance();
    } catch (e) {
      this.failure = `engine step failed: ${(e as Error).message}`;
      this.router.failAll(this.failure);
      this.looping = false;
      return;
    }
    if (outputs.length > 0) this.router.route(outputs);
    setImmediate(() => this.loop());
  }
}
