// Picks the backend (cuda when a device is present under 'auto') and sizes the
// KV cache from the memory the backend reports: a hybrid model's recurrent
// state slots first (one a sequence the engine may run, and as many again for
// states saved for the prefix cache when it is on), then the KV pages of what
// is left.

import type { Backend } from '../backend/backend.js';
import { CpuBackend } from '../backend/cpu/cpu-backend.js';
import { CONV_MAX_TAPS, DELTANET_KEY_DIMS } from '../backend/cuda/kernel-defines.js';
import { bytesPerBlock as bytesPerPage, numBlocksForBytes, stateSlotBytes, type KVCacheGroup } from '../kv/kv-cache-spec.js';
import type { ModelConfig, WeightSource } from '../loader/types.js';
import { kvCacheGroupsOf } from './kv-groups.js';
import type { Model } from '../model/model.js';
import { DEFAULT_CPU_KV_BYTES, shardOptions, type EngineOptions, type ResolvedEngineOptions } from './options.js';
import { weightFitRefusal } from '../model/weight-fit.js';
import { shardedConfig } from '../parallel/sharded-source.js';
import { tensorParallelRefusal } from '../parallel/validate.js';
import { layerPartition, pipelineRefusal, stagedConfig, stageLayers } from '../parallel/pipeline.js';
import { cpus } from 'node:os';

export interface CreatedBackend {
  backend: Backend;
  device: string;
}

async function createCuda(options: EngineOptions): Promise<CreatedBackend> {
  const { CudaBackend } = await import('../backend/cuda/cuda-backend.js');
  const backend = new CudaBackend({ gpuMemoryUtilization: options.gpuMemoryUtilization, enforceEager: options.enforceEager,
    batchInvariant: options.batchInvariant, profile: options.profile, profileLog: 'once-per-shape',
    kvCacheDtype: options.kvCacheDtype, ssmCacheDtype: options.mambaSsmCacheDtype,
    deviceOrdinal: options.deviceOrdinal });
  return { backend, device: backend.device.name };
}

export async function createBackend(options: EngineOptions): Promise<CreatedBackend> {
  if (options.backend === 'cuda') return createCuda(options);
  if (options.backend === 'auto') {
    try {
      return await createCuda(options);
    } catch {
      // no driver, no device or no CUDA libraries: the CPU backend serves
    }
  }
  const backend = new CpuBackend({
    kvCacheBytes: options.kvCacheBytes ?? DEFAULT_CPU_KV_BYTES,
    kvCacheDtype: options.kvCacheDtype,
    ssmCacheDtype: options.mambaSsmCacheDtype,
    ...(options.cpuThreads > 0 ? { numThreads: options.cpuThreads } : {}),
  });
  return { backend, device: cpus()[0]?.model ?? 'cpu' };
}

/**
 * Why this backend cannot run the model, or null: a hybrid model whose DeltaNet sizes the CUDA kernels are not built
 * for is refused before its weights load, naming the field, not by an op that throws in the first step.
 */
export function backendRefusal(config: ModelConfig, backend: 'cpu' | 'cuda'): string | null {
  const h = config.hybrid;
  if (backend !== 'cuda' || h === null) return null;
  const problems: string[] = [];
  if (!DELTANET_KEY_DIMS.includes(h.linearKeyHeadDim)) {
    problems.push(`linear_key_head_dim ${h.linearKeyHeadDim} (the CUDA DeltaNet kernel takes ${DELTANET_KEY_DIMS.join(', ')})`);
  }
  if (h.linearConvKernel < 2 || h.linearConvKernel > CONV_MAX_TAPS) {
    problems.push(`linear_conv_kernel_dim ${h.linearConvKernel} (2 to ${CONV_MAX_TAPS} on CUDA)`);
  }
  if (problems.length === 0) return null;
  return `this ${config.architecture} model's ${problems.join(' and ')}: serve it with --backend cpu`;
}

/** How the KV cache budget is split (sizeKvCache). */
export interface KvCachePlan {
  /** KV pages, block 0 (never handed out) included. */
  numBlocks: number;
  bytesPerBlock: number;
  /** Recurrent-state slots (0: no recurrent group), and the bytes of one: every recurrent layer of a sequence. */
  numStateSlots: number;
  bytesPerStateSlot: number;
  /** Slots for recurrent states saved at page ends (prefix caching on a hybrid model), after the numStateSlots. */
  numCachedStateSlots: number;
  /** Backups of the numStateSlots for speculative decoding on a hybrid model (0 or numStateSlots), after the cached. */
  numSpecBackupSlots: number;
}

/**
 * Running sequences a saved state (prefix caching on a hybrid model) is kept for when the states do not all fit:
 * the running ones come first. qwen3.5-27b on an H200 ran 116 sequences at one saved state each; at one per 4 the same
 * budget held 186 running and 47 saved (session 45's W1).
 */
export const RUNNING_PER_SAVED_STATE = 4;

/**
 * Splits `budgetBytes`: with a recurrent group, one state slot per sequence the engine may run at once
 * (maxNumSeqs; a preempted request gives its slot back and recomputes its state, a finished one at once, so
 * no more are ever held), with prefix caching slots for saved states (an LRU pool; cachedStateSlots, by default
 * maxNumSeqs: as many again, so each running sequence's prompt can leave one; one per RUNNING_PER_SAVED_STATE
 * running where states are lowered to fit), then KV pages of what is left.
 */
export function planKvCache(groups: readonly KVCacheGroup[], o: { blockSize: number; kvBytesPerElement: number;
  budgetBytes: number; maxNumSeqs: number; enablePrefixCaching?: boolean; cachedStateSlots?: number | null;
  lowerToFit?: boolean;
  /** Bytes a page also takes elsewhere: a draft model's K and V of the same positions (spec/draft-proposer.ts). */
  extraBytesPerBlock?: number;
  /** A backup slot per running sequence's state (speculative decoding on a hybrid model: KVCacheManager.specBackupSlot). */
  specBackupSlots?: boolean }): KvCachePlan {
  const bytesPerBlock = bytesPerPage(groups, o.blockSize, o.kvBytesPerElement) + (o.extraBytesPerBlock ?? 0);
  const bytesPerStateSlot = stateSlotBytes(groups);
  let numStateSlots = bytesPerStateSlot > 0 ? o.maxNumSeqs : 0;
  let numCachedStateSlots = o.enablePrefixCaching === true && numStateSlots > 0 ? o.cachedStateSlots ?? numStateSlots : 0;
  if (!Number.isInteger(numCachedStateSlots) || numCachedStateSlots < 0) throw new Error(`bad cachedStateSlots ${numCachedStateSlots}`);
  // With lowerToFit (the engine's sizing), states that leave no room for pages give up sequences instead of failing:
  // the running sequences (and their saved states, one per RUNNING_PER_SAVED_STATE, unless cachedStateSlots fixes
  // those) are lowered to what half the budget holds, the other half left to pages. qwen3.5-27b holds 151 MB of state
  // a sequence: 256 of them, twice with prefix caching, are more than an H200's whole budget.
  const backups = o.specBackupSlots === true ? 1 : 0;
  const stateBytesOf = (running: number, cached: number) => (running * (1 + backups) + cached) * bytesPerStateSlot;
  if (o.lowerToFit === true && numStateSlots > 0 &&
    o.budgetBytes - stateBytesOf(numStateSlots, numCachedStateSlots) < 2 * bytesPerBlock) {
    const fixedCached = o.cachedStateSlots ?? null;
    const half = o.budgetBytes / 2 - (fixedCached !== null ? stateBytesOf(0, numCachedStateSlots) : 0);
    const saves = fixedCached === null && numCachedStateSlots > 0;
    const perSeq = bytesPerStateSlot * (1 + backups + (saves ? 1 / RUNNING_PER_SAVED_STATE : 0));
    numStateSlots = Math.max(1, Math.min(numStateSlots, Math.floor(half / perSeq)));
    if (saves) numCachedStateSlots = Math.ceil(numStateSlots / RUNNING_PER_SAVED_STATE);
  }
  const stateBytes = stateBytesOf(numStateSlots, numCachedStateSlots);
  const numBlocks = numBlocksForBytes(o.budgetBytes - stateBytes, bytesPerBlock);
  if (numBlocks < 2) {
    const slots = numStateSlots > 0
      ? ` after ${numStateSlots + numCachedStateSlots} recurrent state slots of ${bytesPerStateSlot} bytes (${stateBytes} `
        + `bytes: one a sequence, --max-num-seqs${numCachedStateSlots > 0 ? ', twice with prefix caching' : ''}; lower it)`
      : '';
    throw new Error(`the KV cache budget (${o.budgetBytes} bytes) holds no page of ${bytesPerBlock} bytes${slots}: raise `
      + '--kv-cache-memory-bytes or --gpu-memory-utilization');
  }
  return { numBlocks, bytesPerBlock, numStateSlots, bytesPerStateSlot, numCachedStateSlots,
    numSpecBackupSlots: backups * numStateSlots };
}

/**
 * Allocates the KV cache (and a hybrid model's recurrent state slots) on the backend; returns how it is split. A
 * draft model's pages, as many as the target's, come out of the same budget (`draft`: allocated here too). `given`:
 * the split made over every pipeline stage (tp/stage-kv.ts), allocated as it is.
 */
export function sizeKvCache(model: Model, backend: Backend, options: EngineOptions,
  maxModelLen: number, draft: Model | null = null, given?: KvCachePlan): KvCachePlan {
  // an explicit --kv-cache-memory-bytes replaces --gpu-memory-utilization's share (as vLLM's), capped by the memory free
  const m = backend.memory();
  const bytes = options.kvCacheBytes === null ? m.availableKvBytes
    : Math.min(options.kvCacheBytes, m.freeKvBytes ?? m.availableKvBytes);
  const plan = given ?? planKvCache(kvCacheGroupsOf(model), { blockSize: options.blockSize,
    kvBytesPerElement: backend.kvBytesPerElement, budgetBytes: bytes, maxNumSeqs: options.maxNumSeqs,
    enablePrefixCaching: options.enablePrefixCaching, cachedStateSlots: options.cachedStateSlots, lowerToFit: true,
    extraBytesPerBlock: draft ? draft.kvBytesPerToken() * options.blockSize : 0,
    specBackupSlots: options.speculativeConfig != null });
  const { numBlocks } = plan;
  const minBlocks = Math.ceil(maxModelLen / options.blockSize) + 1;
  if (plan.numStateSlots > 0 && plan.numStateSlots < options.maxNumSeqs) {
    process.emitWarning(`--max-num-seqs ${options.maxNumSeqs} lowered to ${plan.numStateSlots}: a sequence of this hybrid `
      + `model holds ${plan.bytesPerStateSlot} bytes of recurrent state${plan.numCachedStateSlots > 0
        ? ` (with prefix caching, ${plan.numCachedStateSlots} saved states besides)` : ''}`
      + `${plan.numSpecBackupSlots > 0 ? ' (and its backup, with speculative decoding)' : ''}, `
      + `and ${options.maxNumSeqs} of them would leave no room for the KV cache; half the budget now holds the states `
      + '(raise --gpu-memory-utilization for more)');
  }
  if (numBlocks < minBlocks) {
    process.emitWarning(`the KV cache holds ${(numBlocks - 1) * options.blockSize} tokens, less than one full context `
      + `of ${maxModelLen}, so the longest requests cannot run: raise --kv-cache-memory-bytes or `
      + '--gpu-memory-utilization (CUDA), or lower --max-model-len');
  }
  const layout = model.recurrentStateLayout(plan.numStateSlots + plan.numCachedStateSlots + plan.numSpecBackupSlots);
  if (layout !== null) backend.allocateRecurrentState(layout);
  backend.allocateKvCache(model.kvCacheSpec(numBlocks, options.blockSize));
  draft?.backend.allocateKvCache(draft.kvCacheSpec(numBlocks, options.blockSize));
  return plan;
}

/**
 * Why the engine cannot start this model on this backend, or null: the backend's own refusal,
 * then on CUDA weights that do not fit the device (under tensor and pipeline parallelism, rank 0's part).
 */
export function startupRefusal(config: ModelConfig, backend: Backend, options: ResolvedEngineOptions,
  weights: WeightSource | null = null): string | null {
  const cannot = backendRefusal(config, backend.name);
  if (cannot || backend.name !== 'cuda') return cannot;
  const { availableKvBytes: budgetBytes, totalBytes } = backend.memory();
  const tp = options.tensorParallelSize;
  const pp = options.pipelineParallelSize;
  const ep = { expertParallel: options.enableExpertParallel };
  let shard = tp > 1 && tensorParallelRefusal(config, tp, ep) === null ? shardedConfig(config, 0, tp, shardOptions(options)) : config;
  // rank 0 holds the last pipeline stage's layers, its final norm and lm_head
  if (pp > 1 && pipelineRefusal(config, pp) === null) {
    shard = stagedConfig(shard, pp - 1, pp, stageLayers(layerPartition(config.numLayers, pp))[pp - 1]!);
  }
  // a GGUF file's blocks as the backend keeps them (a rank's shard under tensor parallelism is dequantized)
  const blockBytes = tp === 1 && backend.uploadGguf && weights?.ggufBlockBytes
    ? (name: string) => weights.ggufBlockBytes!(name) : null;
  // the hybrid families refuse --quantization fp8 (architectures/qwen3_5.ts): not offered them
  return weightFitRefusal(shard, backend.computeDType, options.quantization === 'fp8',
    { budgetBytes, totalBytes, gpuMemoryUtilization: options.gpuMemoryUtilization }, config.hybrid === null, blockBytes);
}
