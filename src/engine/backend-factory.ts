// Picks the backend (cuda when a device is present under 'auto') and sizes the
// KV page pool from the memory the backend reports.

import type { Backend } from '../backend/backend.js';
import { CpuBackend } from '../backend/cpu/cpu-backend.js';
import { bytesPerBlock as bytesPerPage, numBlocksForBytes } from '../kv/kv-cache-spec.js';
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

/** Allocates the KV cache on the backend; returns the number of pages (block 0 included, never handed out). */
export function sizeKvCache(model: Model, backend: Backend, options: EngineOptions, maxModelLen: number): number {
  // the scheduler and the backends do not yet give a sequence a recurrent-state slot (its KV cache group's page)
  if (model.recurrentStateLayout(1) !== null) {
    throw new Error('hybrid linear-attention models (Qwen3.5) do not run in the engine yet: their per-sequence ' +
      'recurrent state has no allocation there (issue 40); Model.forward runs them on the CPU backend');
  }
  const bytesPerBlock = bytesPerPage(kvCacheGroupsOf(model), options.blockSize, backend.kvBytesPerElement);
  let bytes = backend.memory().availableKvBytes;
  if (options.kvCacheBytes !== null) bytes = Math.min(bytes, options.kvCacheBytes);
  const numBlocks = numBlocksForBytes(bytes, bytesPerBlock);
  const minBlocks = Math.ceil(maxModelLen / options.blockSize) + 1;
  if (numBlocks < 2) {
    throw new Error(`the KV cache budget (${bytes} bytes) holds no page of ${bytesPerBlock} bytes: raise --kv-cache-memory-bytes or --gpu-memory-utilization`);
  }
  if (numBlocks < minBlocks) {
    process.emitWarning(`the KV cache holds ${(numBlocks - 1) * options.blockSize} tokens, less than one full context `
      + `of ${maxModelLen}, so the longest requests cannot run: raise --kv-cache-memory-bytes (CPU) or `
      + '--gpu-memory-utilization (CUDA), or lower --max-model-len');
  }
  backend.allocateKvCache(model.kvCacheSpec(numBlocks, options.blockSize));
  return numBlocks;
}
