// Engine configuration, named after vLLM's engine arguments.

export type BackendKind = 'auto' | 'cpu' | 'cuda';
export type StepPolicy = 'decode-first' | 'prefill-first' | 'decode-shape-stable';

export interface EngineOptions {
  model: string;
  backend: BackendKind;
  /** KV page size in tokens. */
  blockSize: number;
  maxNumSeqs: number;
  maxNumBatchedTokens: number;
  /** Context length served; defaults to the model's max_position_embeddings. */
  maxModelLen: number | null;
  enablePrefixCaching: boolean;
  schedulingPolicy: 'fcfs' | 'priority';
  stepPolicy: StepPolicy;
  /** CUDA: fraction of device memory the engine may use (weights + workspace + KV). */
  gpuMemoryUtilization: number;
  /** CPU: bytes given to the KV cache. Also caps the GPU pool when set. */
  kvCacheBytes: number | null;
  /** Disables CUDA graphs. */
  enforceEager: boolean;
  /**
   * Schedules and launches each step before the previous one's tokens reach the host (vLLM's
   * --async-scheduling), so the device never waits on scheduling; the same transcripts.
   */
  asyncScheduling: boolean;
  /** CUDA: GEMMs whose sums do not depend on the batch (kernels/gemm_rows.cu), every row's attention on the decode kernel. */
  batchInvariant: boolean;
  /** CUDA: per-op profile tables (one per graph bucket and per eager step shape) on stderr. */
  profile: boolean;
  /** Engine-level RNG seed for requests that bring none. */
  seed: number;
  /** Records the admission trace (printed at shutdown). */
  schedulerTrace: boolean;
  /** Threads the CPU backend splits matmuls across (0 = every core). */
  cpuThreads: number;
}

export const DEFAULT_CPU_KV_BYTES = 256 * 1024 * 1024;

export function engineOptions(o: Partial<EngineOptions> & { model: string }): EngineOptions {
  return {
    backend: 'auto',
    blockSize: 16,
    maxNumSeqs: 256,
    maxNumBatchedTokens: 2048,
    maxModelLen: null,
    enablePrefixCaching: true,
    schedulingPolicy: 'fcfs',
    stepPolicy: 'decode-first',
    gpuMemoryUtilization: 0.9,
    kvCacheBytes: null,
    enforceEager: false,
    asyncScheduling: true,
    batchInvariant: false,
    profile: false,
    seed: 0,
    schedulerTrace: false,
    cpuThreads: 0,
    ...o,
  };
}
