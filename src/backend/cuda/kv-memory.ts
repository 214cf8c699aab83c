// The paged KV cache's device memory: K and V of every layer, [numBlocks, blockSize, numKvHeads, headDim] each,
// in one allocation, and what the memory budget leaves the cache.

import type { KvCacheSpec } from '../batch.js';
import type { MemoryReport } from '../backend.js';
import { Device } from './device.js';
import { kvCacheBudget } from './memory-budget.js';

const ATTENTION_HEAD_DIMS = [64, 128, 256];

interface KvCache {
  spec: KvCacheSpec;
  base: bigint;
  layerBytes: number;
}

export class KvMemory {
  private kv: KvCache | null = null;
  /** Bumped whenever the cache is replaced (a captured graph names its pages by address). */
  generation = 0;
  /** Free device memory before the backend allocated anything (memory-budget.ts). */
  private readonly freeAtStartBytes: number;

  constructor(private readonly device: Device, readonly bytesPerElement: number) {
    this.freeAtStartBytes = device.memInfo().freeBytes;
  }

  allocate(spec: KvCacheSpec): void {
    if (!ATTENTION_HEAD_DIMS.includes(spec.headDim)) {
      throw new Error(`CudaBackend: head dim ${spec.headDim} not supported (${ATTENTION_HEAD_DIMS.join(', ')})`);
    }
    if (!Number.isInteger(Math.log2(spec.blockSize))) {
      throw new Error(`CudaBackend: block size ${spec.blockSize} is not a power of two (--block-size 16 or 32)`);
    }
    if (this.kv) {
      this.device.synchronize();
      this.device.free(this.kv.base);
    }
    const layerBytes = spec.numBlocks * spec.blockSize * spec.numKvHeads * spec.headDim * this.bytesPerElement;
    const base = this.device.alloc(2 * spec.numLayers * layerBytes);
    this.device.fillBytesAsync(base, 0, 2 * spec.numLayers * layerBytes);
    this.kv = { spec: { ...spec }, base, layerBytes };
    this.generation++;
  }

  /** Device pointers of layer `layer`'s K and V pages. */
  layer(layer: number): { k: bigint; v: bigint; spec: KvCacheSpec } {
    if (!this.kv) throw new Error('CudaBackend: allocateKvCache() first');
    const k = this.kv.base + BigInt(2 * layer * this.kv.layerBytes);
    return { k, v: k + BigInt(this.kv.layerBytes), spec: this.kv.spec };
  }

  /** Tests: fills the KV cache with `byte` (0xff: bf16 NaN) so a read of an unwritten slot shows. */
  fill(byte: number): void {
    if (!this.kv) throw new Error('CudaBackend: allocateKvCache() first');
    this.device.fillBytesAsync(this.kv.base, byte, 2 * this.kv.spec.numLayers * this.kv.layerBytes);
  }

  /** What the budget (--gpu-memory-utilization, less what activations keep) leaves the cache now. */
  report(o: { gpuMemoryUtilization: number; reserveBytes: number; weightBytes: number }): MemoryReport {
    const { freeBytes, totalBytes } = this.device.memInfo();
    const availableKvBytes = kvCacheBudget({ totalBytes, freeAtStartBytes: this.freeAtStartBytes, freeBytes,
      allocatedBytes: this.device.allocatedBytes, gpuMemoryUtilization: o.gpuMemoryUtilization, reserveBytes: o.reserveBytes });
    return { availableKvBytes, totalBytes, weightBytes: o.weightBytes };
  }

  dispose(): void {
    if (this.kv) this.device.free(this.kv.base);
    this.kv = null;
  }
}
