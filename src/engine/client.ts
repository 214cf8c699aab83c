// What the API layer (and the offline LLM) hold of an engine: submit requests,
// receive their outputs as they are produced, abort, read stats. Implemented
// in-process (EngineCore's async driver) and across a worker thread.

import type { EngineOutput, EngineRequest, EngineStats } from './types.js';

export interface EngineClient {
  /** Submits a request; outputs arrive on the returned iterator until one is finished. */
  generate(req: EngineRequest): AsyncIterable<EngineOutput>;
  /** Aborts a request: its pages are freed at once; its iterator ends with finishReason 'abort'. */
  abort(requestId: string): void;
  stats(): EngineStats;
  /** Stops the step loop and frees the backend. */
  shutdown(): Promise<void>;
  /**
   * A data-parallel engine's stats, one entry per replica (stats() is their sum); absent, or null, for one engine.
   * The metrics label each replica's series with it (engine="i").
   */
  replicaStats?(): EngineStats[] | null;
}
