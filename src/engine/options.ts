// Engine configuration, named after vLLM's engine arguments.

import type { KvCacheDtype } from '../loader/fp8.js';
import type { SsmCacheDtype } from '../backend/backend.js';
import type { ShardOptions } from '../parallel/sharded-source.js';
import type { ExpertPlacement } from '../parallel/sharding.js';
import { parseSpeculativeConfig, type SpeculativeConfig, type SpeculativeConfigInput } from './spec/config.js';

export type { SsmCacheDtype };

export type BackendKind = 'auto' | 'cpu' | 'cuda';
export type StepPolicy = 'decode-first' | 'prefill-first' | 'decode-shape-stable';
/** Who runs the engine, as vLLM's UsageContext: the offline LLM class (and the bench, generate and gate CLIs) or the API server. */
export type UsageContext = 'llm-class' | 'api-server';

export interface EngineOptions {
  model: string;
  backend: BackendKind;
  /** KV page size in tokens. */
  blockSize: number;
  maxNumSeqs: number;
  /** Token budget per step; null: vLLM's default for the device and the usage context (defaultMaxNumBatchedTokens). */
  maxNumBatchedTokens: number | null;
  usageContext: UsageContext;
  /** Context length served; defaults to the model's (defaultMaxModelLen: max_position_embeddings, or as its RoPE scaling stretches it). */
  maxModelLen: number | null;
  enablePrefixCaching: boolean;
  /**
   * A hybrid model with prefix caching: recurrent states saved at page ends for hits (an LRU pool, counted in the KV
   * budget); null: maxNumSeqs of them. Not a CLI flag yet.
   */
  cachedStateSlots: number | null;
  /** Prompts longer than a step's budget are prefilled over several steps (vLLM's --enable-chunked-prefill). */
  enableChunkedPrefill: boolean;
  /** Most prompt tokens one request gets per step; 0 = the budget (vLLM's --long-prefill-token-threshold). */
  longPrefillTokenThreshold: number;
  schedulingPolicy: 'fcfs' | 'priority';
  stepPolicy: StepPolicy;
  /** CUDA: fraction of device memory the engine may use (weights + workspace + KV). */
  gpuMemoryUtilization: number;
  /**
   * Bytes given to the KV cache. CUDA: in place of --gpu-memory-utilization's share when set (vLLM's
   * kv_cache_memory_bytes), up to the memory free.
   */
  kvCacheBytes: number | null;
  /** vLLM's --kv-cache-dtype: 'auto' (the compute dtype) or FP8 E4M3 (half the bytes a token, lossy). */
  kvCacheDtype: KvCacheDtype;
  /**
   * vLLM's --mamba-ssm-cache-dtype: a gated DeltaNet layer's delta-rule state between steps, 'f32' (what Qwen3.5's
   * config asks for and vLLM then keeps) or 'bf16' (half the state bytes a step moves and a slot holds; lossy, and
   * rounded where steps end, so a transcript also depends on chunking).
   */
  mambaSsmCacheDtype: SsmCacheDtype;
  /**
   * vLLM's --quantization: 'fp8' quantizes a float checkpoint's projections to block FP8 at load (W8A8, as a
   * block-FP8 checkpoint computes; src/model/weights.ts); null keeps the checkpoint's precision.
   */
  quantization: 'fp8' | null;
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
  /** Top-level config.json fields replaced before the model is read (vLLM's --hf-overrides), e.g. rope_scaling. */
  hfOverrides: Record<string, unknown> | null;
  /** A directory (or cached repo id) to take the tokenizer and chat template from (vLLM's --tokenizer). */
  tokenizer: string | null;
  /**
   * Speculative decoding (vLLM's --speculative-config, spec/config.ts): proposals verified in the same forward as
   * each decode token; null: off. The LLM class may pass vLLM's dict ({"method": "ngram", ...}): checked at start-up.
   */
  speculativeConfig: SpeculativeConfigInput | null;
  /**
   * Most grammar hosts: threads that compile structured outputs' grammars and hold their matchers, off the engine
   * thread (sampling/grammar-hosts.ts). Each holds the vocabulary (some 120 MB for a 151k-token one).
   */
  grammarHosts: number;
  /**
   * Engine replicas, each a whole engine in its own worker thread on its own device (vLLM's --data-parallel-size):
   * requests are spread over them by load and prefix-cache affinity (data-parallel-client.ts). 1: one engine, as
   * before (no router in front of it).
   */
  dataParallelSize: number;
  /**
   * CUDA: the device this engine runs on (replica i of a data-parallel engine: deviceOrdinal + i x
   * tensorParallelSize x pipelineParallelSize); the CPU backend ignores it.
   */
  deviceOrdinal: number;
  /**
   * Ranks each engine's model is split over (vLLM's --tensor-parallel-size): rank r on device deviceOrdinal + r, a
   * worker thread each beside the engine's (engine/tp/). On the CPU backend, threads meeting in shared memory.
   */
  tensorParallelSize: number;
  /**
   * Stages each engine's layers are split over (vLLM's --pipeline-parallel-size): contiguous layer ranges
   * (parallel/pipeline.ts), each stage tensorParallelSize ranks; the engine's thread runs the last stage (its
   * logits and tokens stay where the sampler is: engine/tp/leader.ts says why). Ranks on devices deviceOrdinal ..
   * + tensorParallelSize x pipelineParallelSize - 1.
   */
  pipelineParallelSize: number;
  /**
   * CUDA tensor parallelism: every all-reduce over NCCL, none over the one-shot peer-memory kernel (vLLM's
   * --disable-custom-all-reduce).
   */
  disableCustomAllReduce: boolean;
  /**
   * A mixture of experts under tensor parallelism: each rank holds whole experts, numExperts / tensorParallelSize of
   * them, and runs only the routed tokens' contributions of its own (vLLM's --enable-expert-parallel); off: every
   * expert split on its width over the ranks. Attention, dense MLPs and shared experts split as without it. No effect
   * on a dense model or at tensorParallelSize 1, as in vLLM.
   */
  enableExpertParallel: boolean;
  /** Which experts a rank holds (vLLM's --expert-placement-strategy): contiguous ranges, or expert e on rank e mod tp. */
  expertPlacementStrategy: ExpertPlacement;
  /**
   * Machines the tensor-parallel ranks span (vLLM's and torchrun's --nnodes), tensorParallelSize / nnodes ranks each;
   * this one is node nodeRank. Node 0 runs the engine and listens on masterAddr:masterPort for the others
   * (engine/tp/node-link.ts).
   */
  nnodes: number;
  nodeRank: number;
  masterAddr: string;
  masterPort: number;
}

export const DEFAULT_CPU_KV_BYTES = 256 * 1024 * 1024;

/** Ranks one engine runs: its tensor-parallel ranks in each pipeline stage. */
export function worldSize(o: Pick<EngineOptions, 'tensorParallelSize' | 'pipelineParallelSize'>): number {
  return o.tensorParallelSize * o.pipelineParallelSize;
}

/** How the options split a model's experts over the tensor-parallel ranks (parallel/sharded-source.ts). */
export function shardOptions(o: Pick<EngineOptions, 'enableExpertParallel' | 'expertPlacementStrategy'>): ShardOptions {
  return { expertParallel: o.enableExpertParallel ? o.expertPlacementStrategy : null };
}

export function engineOptions(o: Partial<EngineOptions> & { model: string }): EngineOptions {
  return {
    backend: 'auto',
    blockSize: 16,
    maxNumSeqs: 256,
    maxNumBatchedTokens: null,
    usageContext: 'llm-class',
    maxModelLen: null,
    enablePrefixCaching: true,
    cachedStateSlots: null,
    enableChunkedPrefill: true,
    longPrefillTokenThreshold: 0,
    schedulingPolicy: 'fcfs',
    stepPolicy: 'decode-first',
    gpuMemoryUtilization: 0.9,
    kvCacheBytes: null,
    kvCacheDtype: 'auto',
    mambaSsmCacheDtype: 'f32',
    quantization: null,
    enforceEager: false,
    asyncScheduling: true,
    batchInvariant: false,
    profile: false,
    seed: 0,
    schedulerTrace: false,
    cpuThreads: 0,
    hfOverrides: null,
    tokenizer: null,
    speculativeConfig: null,
    grammarHosts: 4,
    dataParallelSize: 1,
    deviceOrdinal: 0,
    tensorParallelSize: 1,
    pipelineParallelSize: 1,
    disableCustomAllReduce: false,
    enableExpertParallel: false,
    expertPlacementStrategy: 'linear',
    nnodes: 1,
    nodeRank: 0,
    masterAddr: '127.0.0.1',
    masterPort: 29501,
    ...o,
  };
}

/** EngineOptions with the per-device defaults filled in (createEngineCore). */
export type ResolvedEngineOptions = Omit<EngineOptions, 'speculativeConfig'> & {
  maxNumBatchedTokens: number;
  speculativeConfig: SpeculativeConfig | null;
};

/** What picks the per-device defaults. */
export interface DeviceFacts {
  backend: 'cpu' | 'cuda';
  /** The device's name, as the backend reports it. */
  name: string;
  totalBytes: number;
}

const GIB = 2 ** 30;

/**
 * The token budget per step when none is given, as vLLM sets it: on GPUs of 70 GiB and more other than the A100
 * (H100, H200, MI300x) 16,384 for the LLM class and 8,192 for the API server, on smaller GPUs 8,192 and 2,048.
 * The CPU backend keeps 2,048 for both (it is the reference, not a serving target).
 */
export function defaultMaxNumBatchedTokens(usage: UsageContext, device: DeviceFacts): number {
  if (device.backend !== 'cuda') return 2048;
  const large = device.totalBytes >= 70 * GIB && !/a100/i.test(device.name);
  if (usage === 'llm-class') return large ? 16384 : 8192;
  return large ? 8192 : 2048;
}

export function resolveEngineOptions(o: EngineOptions, device: DeviceFacts): ResolvedEngineOptions {
  return { ...o, maxNumBatchedTokens: o.maxNumBatchedTokens ?? defaultMaxNumBatchedTokens(o.usageContext, device),
    speculativeConfig: o.speculativeConfig == null ? null : parseSpeculativeConfig(o.speculativeConfig) };
}
