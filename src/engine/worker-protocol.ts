// Messages across the worker-thread boundary (structured-clonable plain data).

import type { EngineOptions } from './options.js';
import type { EngineOutput, EngineRequest, EngineStats } from './types.js';

export interface EngineInfo {
  backend: 'cpu' | 'cuda';
  device: string;
  numBlocks: number;
  /** A hybrid model's recurrent-state slots (a sequence each) and the bytes of one; 0 for other models. */
  numStateSlots: number;
  bytesPerStateSlot: number;
  /** Its slots for states saved for prefix-cache hits, of the same bytes (0: none). */
  numCachedStateSlots: number;
  blockSize: number;
  maxModelLen: number;
  vocabSize: number;
  loadMs: number;
  /** Bytes of weights one decode step reads (the bandwidth roofline's numerator). */
  weightBytesPerStep: number;
  /** Bytes of K and V a token of context holds over every attention layer (a decode step reads them all). */
  kvBytesPerToken: number;
  /** The token budget per step in effect (the flag's value, or the default for this device). */
  maxNumBatchedTokens: number;
  maxNumSeqs: number;
}

export type ProbeKind = 'copyBandwidth' | 'gemmPeak';

export type ToWorker =
  | { type: 'add'; req: EngineRequest }
  | { type: 'abort'; requestId: string }
  /** A figure of the device for the bench's rooflines (EngineCore.copyBandwidth / gemmPeak), answered by a 'probe'. */
  | { type: 'probe'; what: ProbeKind }
  | { type: 'shutdown' };

export type FromWorker =
  | { type: 'ready'; info: EngineInfo; stats: EngineStats }
  | { type: 'outputs'; outputs: EngineOutput[]; stats: EngineStats }
  /** Stats alone: on a timer, and when a request is admitted or aborted, so gauges never wait for outputs. */
  | { type: 'stats'; stats: EngineStats }
  | { type: 'failed'; message: string }
  | { type: 'probe'; what: ProbeKind; value: number | null }
  | { type: 'closed'; traceSummary: string | null };

export interface WorkerInit {
  options: EngineOptions;
}
