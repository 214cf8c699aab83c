// Plain, structured-clonable messages between the API (or offline LLM) and the
// engine core, which may run in a worker thread.

import type { SamplingParams } from '../sampling/params.js';
import type { SpecDecodingStats } from './spec/spec-decode.js';

export type FinishReason = 'stop' | 'length' | 'abort' | 'error';

export interface EngineRequest {
  requestId: string;
  promptTokenIds: number[];
  sampling: SamplingParams;
  /** Lower runs first under the priority policy (vLLM semantics). */
  priority: number;
  cacheSalt: string | null;
  /** ms since epoch. */
  arrivalTime: number;
  /**
   * An embedding request (a pooling runner, vLLM's `--runner pooling`): the prompt is prefilled and its pooled
   * final hidden state comes back as `embedding`; nothing is generated.
   */
  pooling?: PoolingParams;
}

/** How an embedding request's last token's final hidden state becomes its embedding (vLLM's LAST pooler). */
export interface PoolingParams {
  /** Divide by the L2 norm (after any truncation to `dimensions`). */
  normalize: boolean;
  /** Keep the first `dimensions` values (Matryoshka models); null: all. */
  dimensions: number | null;
}

export type { TokenLogprob } from '../sampling/types.js';
import type { TokenLogprob } from '../sampling/types.js';

/** One step's news for one request. */
export interface EngineOutput {
  requestId: string;
  newTokenIds: number[];
  /** Present when the request asked for logprobs: one per new token. */
  logprobs?: TokenLogprob[];
  finished: boolean;
  finishReason?: FinishReason;
  /** Which stop token id ended it, when finishReason is 'stop' by token. */
  stopTokenId?: number;
  /**
   * Present on the first output when the request asked for prompt logprobs: one per prompt token, null for the
   * first (nothing predicts it).
   */
  promptLogprobs?: (TokenLogprob | null)[];
  /** Prompt tokens served from the prefix cache (set on the first output). */
  numCachedTokens?: number;
  /** An embedding request's embedding (its only output, finished). */
  embedding?: number[];
  error?: string;
}

export interface EngineStats {
  numRunning: number;
  /** Most sequences running at once since the engine started. */
  numRunningPeak: number;
  numWaiting: number;
  /** Fraction of KV pages in use, 0..1. */
  kvCacheUsage: number;
  numFreeBlocks: number;
  numTotalBlocks: number;
  /** A hybrid model's recurrent-state slots (one a running sequence); 0 for other models. */
  numFreeStateSlots: number;
  numTotalStateSlots: number;
  /** A hybrid model's recurrent states saved for prefix-cache hits now, and the slots for them (0: none). */
  numCachedStates: number;
  numCachedStateSlots: number;
  prefixCacheQueries: number;
  prefixCacheHits: number;
  numPreemptions: number;
  numPromptTokens: number;
  numGenerationTokens: number;
  numSteps: number;
  /** Steps scheduled and launched before the previous step's tokens reached the host (async scheduling). */
  numStepsScheduledAhead: number;
  /** Wall time inside step(): the forward pass and its sampling (until the tokens are on the host)... */
  executeMs: number;
  /** ...and everything else (scheduling, batch building, updates, stop checks). */
  hostMs: number;
  /** CUDA graphs captured, and the wall time of the steps that captured them (part of executeMs). */
  numGraphCaptures: number;
  graphCaptureMs: number;
  /** Speculative decoding's counters (vLLM's spec_decode metrics); absent when it is off. */
  specDecoding?: SpecDecodingStats;
  /**
   * Bytes the steps so far had to move at the least: the weights once per step, every scheduled sequence's KV cache
   * once, and a hybrid model's recurrent state of every scheduled sequence read and written (the bandwidth floor's
   * numerator, as bench decode's roofline counts them).
   */
  minBytesRead: number;
}
