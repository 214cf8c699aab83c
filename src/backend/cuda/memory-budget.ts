// How much device memory the KV cache may take, with vLLM's meaning of
// --gpu-memory-utilization: this engine may hold that fraction of the device's
// total memory. What it holds already (weights, workspace, buffers) is what the
// device's free memory lost since the engine started, and never less than its own
// allocations (another process may free memory meanwhile); memory other processes
// hold does not count against the fraction (two engines at 0.4 share a GPU),
// and only the memory actually free caps the result. --kv-cache-memory-bytes takes the fraction's place (vLLM's
// kv_cache_memory_bytes ignores gpu_memory_utilization): freeKvBudget is what the free memory alone leaves.

export interface MemoryState {
  totalBytes: number;
  /** Free device memory when the engine started (its CUDA context already made). */
  freeAtStartBytes: number;
  freeBytes: number;
  /** Device memory the engine's own allocations hold now (weights, workspace, buffers). */
  allocatedBytes: number;
  gpuMemoryUtilization: number;
  /** Kept back for activations the workspace has not allocated yet. */
  reserveBytes: number;
}

export function kvCacheBudget(m: MemoryState): number {
  // what the free memory lost since the start, unless another process freed memory meanwhile: never less than
  // the engine's own allocations
  const held = Math.max(m.allocatedBytes, m.freeAtStartBytes - m.freeBytes);
  const budget = Math.min(m.gpuMemoryUtilization * m.totalBytes - held, m.freeBytes);
  return Math.max(0, Math.floor(budget - m.reserveBytes));
}

/**
 * What the KV cache could take whatever --gpu-memory-utilization says: the memory free now less the activation
 * reserve. With --kv-cache-memory-bytes the cache gets those bytes up to this, so an engine beside another that
 * allocated since it started (whose bytes look held by this one to kvCacheBudget) still gets the bytes it names.
 */
export function freeKvBudget(m: Pick<MemoryState, 'freeBytes' | 'reserveBytes'>): number {
  return Math.max(0, Math.floor(m.freeBytes - m.reserveBytes));
}
