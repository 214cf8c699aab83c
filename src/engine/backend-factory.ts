// Picks the backend (cuda when a device is present under 'auto') and sizes the
// KV cache from the memory the backend reports: a hybrid model's recurrent
// state slots first (one a sequence the engine may run, and as many again for
// states saved for the prefix cache when it is on), then the KV pages of what
// is left.

import type { Backend } from '../backend/backend.js';
import { CpuBackend } from '../backend/cpu/cpu-backend.js';
import { bytesPerBlock as bytesPerPage, numBlocksForBytes, stateSlotBytes, type KVCacheGroup } from '../kv/kv-cache-spec.js';
import type { ModelConfig } from '../loader/types.js';
import { kvCacheGroupsOf } from './kv-groups.js';
import type { Model } from '../model/model.js';
import { DEFAULT_CPU_KV_BYTES, type EngineOptions } from './options.js';
import { cpus } from 'node:os';

export interface CreatedBackend {
  backend: Backend;
  device: string;
}

async function createCuda(options: EngineOptions): Promise<CreatedBackend> {
  const { CudaBackend } = await import('../backend/cuda/cuda-backend.js');
  const backend = new CudaBackend({ gpuMemoryUtilization: options.gpuMemoryUtilization, enforceEager: options.enforceEager,
    batchInvariant: options.batchInvariant, profile: options.profile, profileLog: 'once-per-shape',
    kvCacheDtype: options.kvCacheDtype });
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
    ...(options.cpuThreads > 0 ? { numThreads: options.cpuThreads } : {}),
  });
  return { backend, device: cpus()[0]?.model ?? 'cpu' };
}

/**
 * Why this backend cannot run the model, or null. The CUDA backend has no gated DeltaNet kernels yet: a hybrid
 * model is refused before its weights load, not by an op that throws in the first step.
 */
export function backendRefusal(config: ModelConfig, backend: 'cpu' | 'cuda'): string | null {
  if (backend !== 'cuda' || config.hybrid === null) return null;
  return `this ${config.architecture} model is a hybrid linear-attention model (gated DeltaNet layers): the CUDA backend has no `
    + 'kernels for them yet (issue 40); serve it with --backend cpu';
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
}

/**
 * Splits `budgetBytes`: with a recurrent group, one state slot per sequence the engine may run at once
 * (maxNumSeqs; a preempted request gives its slot back and recomputes its state, a finished one at once, so
 * no more are ever held), with prefix caching slots for saved states (an LRU pool; cachedStateSlots, by default
 * maxNumSeqs: as many again, so each running sequence's prompt can leave one), then KV pages of what is left.
 */
export function planKvCache(groups: readonly KVCacheGroup[], o: { blockSize: number; kvBytesPerElement: number;
  budgetBytes: number; maxNumSeqs: number; enablePrefixCaching?: boolean; cachedStateSlots?: number | null }): KvCachePlan {
  const bytesPerBlock = bytesPerPage(groups, o.blockSize, o.kvBytesPerElement);
  const bytesPerStateSlot = stateSlotBytes(groups);
  const numStateSlots = bytesPerStateSlot > 0 ? o.maxNumSeqs : 0;
  const numCachedStateSlots = o.enablePrefixCaching === true && numStateSlots > 0 ? o.cachedStateSlots ?? numStateSlots : 0;
  if (!Number.isInteger(numCachedStateSlots) || numCachedStateSlots < 0) throw new Error(`bad cachedStateSlots ${numCachedStateSlots}`);
  const stateBytes = (numStateSlots + numCachedStateSlots) * bytesPerStateSlot;
  const numBlocks = numBlocksForBytes(o.budgetBytes - stateBytes, bytesPerBlock);
  if (numBlocks < 2) {
    const slots = numStateSlots > 0
      ? ` after ${numStateSlots + numCachedStateSlots} recurrent state slots of ${bytesPerStateSlot} bytes (${stateBytes} `
        + `bytes: one a sequence, --max-num-seqs${numCachedStateSlots > 0 ? ', twice with prefix caching' : ''}; lower it)`
      : '';
    throw new Error(`the KV cache budget (${o.budgetBytes} bytes) holds no page of ${bytesPerBlock} bytes${slots}: raise `
      + '--kv-cache-memory-bytes or --gpu-memory-utilization');
  }
  return { numBlocks, bytesPerBlock, numStateSlots, bytesPerStateSlot, numCachedStateSlots };
}

/** Allocates the KV cache (and a hybrid model's recurrent state slots) on the backend; returns how it is split. */
export function sizeKvCache(model: Model, backend: Backend, options: EngineOptions,
  maxModelLen: number): KvCachePlan {
  let bytes = backend.memory().availableKvBytes;
  if (options.kvCacheBytes !== null) bytes = Math.min(bytes, options.kvCacheBytes);
  const plan = planKvCache(kvCacheGroupsOf(model), { blockSize: options.blockSize,
    kvBytesPerElement: backend.kvBytesPerElement, budgetBytes: bytes, maxNumSeqs: options.maxNumSeqs,
    enablePrefixCaching: options.enablePrefixCaching, cachedStateSlots: options.cachedStateSlots });
  const { numBlocks } = plan;
  const minBlocks = Math.ceil(maxModelLen / options.blockSize) + 1;
  if (numBlocks < minBlocks) {
    process.emitWarning(`the KV cache holds ${(numBlocks - 1) * options.blockSize} tokens, less than one full context `
      + `of ${maxModelLen}, so the longest requests cannot run: raise --kv-cache-memory-bytes (CPU) or `
      + '--gpu-memory-utilization (CUDA), or lower --max-model-len');
  }
  const layout = model.recurrentStateLayout(plan.numStateSlots + plan.numCachedStateSlots);
  if (layout !== null) backend.allocateRecurrentState(layout);
  backend.allocateKvCache(model.kvCacheSpec(numBlocks, options.blockSize));
  return plan;
}
