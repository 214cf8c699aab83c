// Per-request output queues: the engine loop pushes, the consumer awaits.
// No polling: a waiting consumer is woken by the push that concerns it.

import type { EngineOutput } from './types.js';

export class OutputStream implements AsyncIterable<EngineOutput> {
  private readonly items: EngineOutput[] = [];
  private wake: (() => void) | null = null;
  private done = false;

  push(o: EngineOutput): void {
    if (this.done) return;
    this.items.push(o);
    if (o.finished) this.done = true;
    const w = this.wake;
    this.wake = null;
    w?.();
  }

  get finished(): boolean {
    return this.done;
  }

  async *[Symbol.asyncIterator](): AsyncIterator<EngineOutput> {
    for (;;) {
      const o = this.items.shift();
      if (o) {
        yield o;
        if (o.finished) return;
        continue;
      }
      await new Promise<void>((r) => (this.wake = r));
    }
  }
}

/** Routes outputs to the stream of their request; forgets a stream once it finished. */
export class OutputRouter {
  private readonly streams = new Map<string, OutputStream>();

  open(requestId: string): OutputStream {
    if (this.streams.has(requestId)) throw new Error(`request id "${requestId}" is already running`);
    const s = new OutputStream();
    this.streams.set(requestId, s);
    return s;
  }

  route(outputs: readonly EngineOutput[]): void {
    for (const o of outputs) {
      const s = this.streams.get(o.requestId);
      if (!s) continue;
      s.push(o);
      if (o.finished) this.streams.delete(o.requestId);
    }
  }

  /** Ends every open stream (engine failure or shutdown). */
  failAll(error: string): void {
    for (const [id, s] of this.streams) {
      s.push({ requestId: id, newTokenIds: [], finished: true, finishReason: 'error', error });
    }
    this.streams.clear();
  }

  get size(): number {
    return this.streams.size;
  }
}
