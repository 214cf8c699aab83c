// An EngineClient that exists before its engine does: the server listens (and
// answers /health 503) while the model loads, then forwards to the real client.

import type { EngineClient } from './client.js';
import { emptyStats } from './stats.js';
import type { EngineOutput, EngineRequest, EngineStats } from './types.js';

export class DeferredEngineClient implements EngineClient {
  private target: (EngineClient & { error?: string | null }) | null = null;
  private loadError: string | null = null;

  attach(client: EngineClient & { error?: string | null }): void {
    this.target = client;
  }

  /** The model failed to load: the server reports it on /health and refuses work. */
  failed(message: string): void {
    this.loadError = message;
  }

  get error(): string | null {
    return this.loadError ?? this.target?.error ?? null;
  }

  generate(req: EngineRequest): AsyncIterable<EngineOutput> {
    if (!this.target) throw new Error('the engine is not ready');
    return this.target.generate(req);
  }

  abort(requestId: string): void {
    this.target?.abort(requestId);
  }

  stats(): EngineStats {
    return this.target?.stats() ?? emptyStats();
  }

  replicaStats(): EngineStats[] | null {
    return this.target?.replicaStats?.() ?? null;
  }

  async shutdown(): Promise<void> {
    await this.target?.shutdown();
  }
}
