// The KV cache's device memory: the paged group's K and V of every layer, [numBlocks, blockSize, numKvHeads, headDim]
// each, in one allocation; a hybrid model's recurrent group (its state slots, kernels/deltanet.cu's layout) in
// another; and what the memory budget leaves the cache. Replacing either bumps the generation (graphs name both by
// address).

import type { KvCacheSpec } from '../batch.js';
import { convChannels, type MemoryReport, type RecurrentStateLayout } from '../backend.js';
import { Device } from './device.js';
import { freeKvBudget, kvCacheBudget } from './memory-budget.js';

const ATTENTION_HEAD_DIMS = [64, 128, 256];

interface KvCache {
  spec: KvCacheSpec;
  base: bigint;
  layerBytes: number;
}

/**
 * The recurrent states: slot s at base + s * slotFloats floats; in it every layer's conv window ([K - 1, C],
 * convFloats f32 each), then every layer's delta-rule state ([Hv, Dk, Dv], ssmElements each, of ssmBytesPerElement:
 * f32, or bf16 for kernels/deltanet.cu's _sbf16 builds).
 */
export interface RecurrentMemory {
  layout: RecurrentStateLayout;
  base: bigint;
  convFloats: number;
  ssmElements: number;
  ssmBytesPerElement: number;
  slotFloats: number;
  /**
   * [numSlots, numKeyHeads] int32, zero between launches: the fused decode kernel's count of the blocks (a key head's
   * v heads) that have read a q/k conv window, so that the last one writes it (kernels/deltanet.cu).
   */
  arrivals: bigint;
}

export class KvMemory {
  private kv: KvCache | null = null;
  private states: RecurrentMemory | null = null;
  /** Bumped whenever the cache is replaced (a captured graph names its pages by address). */
  generation = 0;
  /** Free device memory before the backend allocated anything (memory-budget.ts). */
  private readonly freeAtStartBytes: number;

  constructor(private readonly device: Device, readonly bytesPerElement: number, readonly ssmBytesPerElement = 4) {
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

  /** Allocates (zeroed) the recurrent state slots (Backend.allocateRecurrentState). */
  allocateRecurrent(layout: RecurrentStateLayout): void {
    const sh = layout.shape;
    if (this.states) {
      this.device.synchronize();
      this.device.free(this.states.base);
      this.device.free(this.states.arrivals);
      this.states = null;
    }
    const convFloats = (sh.convKernel - 1) * convChannels(sh);
    const ssmElements = sh.numValueHeads * sh.keyDim * sh.valueDim;
    // a slot in whole floats (the kernels address slots in floats; 2 bf16 elements a float: Dk is a multiple of 32)
    const slotFloats = layout.numLayers * (convFloats + Math.ceil(ssmElements * this.ssmBytesPerElement / 4));
    const bytes = 4 * layout.numSlots * slotFloats;
    const base = this.device.alloc(bytes);
    this.device.fillBytesAsync(base, 0, bytes);
    const arrivalBytes = 4 * layout.numSlots * sh.numKeyHeads;
    const arrivals = this.device.alloc(arrivalBytes);
    this.device.fillBytesAsync(arrivals, 0, arrivalBytes);
    this.states = { layout: { ...layout, shape: { ...sh } }, base, convFloats, ssmElements,
      ssmBytesPerElement: this.ssmBytesPerElement, slotFloats, arrivals };
    this.generation++;
  }

  recurrent(): RecurrentMemory {
    if (!this.states) throw new Error('CudaBackend: allocateRecurrentState() first');
    return this.states;
  }

  /** Slot src's state over slot dst's, in stream order (Backend.copyRecurrentState): one copy, a slot is contiguous. */
  copyRecurrent(src: number, dst: number): void {
    const r = this.recurrent();
    const n = r.layout.numSlots;
    if (!(Number.isInteger(src) && Number.isInteger(dst) && src >= 0 && dst >= 0 && src < n && dst < n)) {
      throw new Error(`copyRecurrentState: slots ${src} -> ${dst} outside the ${n} allocated`);
    }
    if (src === dst) return;
    const bytes = 4 * r.slotFloats;
    this.device.copyDeviceAsync(r.base + BigInt(dst * bytes), r.base + BigInt(src * bytes), bytes);
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
    return { availableKvBytes, freeKvBytes: freeKvBudget({ freeBytes, reserveBytes: o.reserveBytes }), totalBytes,
      weightBytes: o.weightBytes };
  }

  dispose(): void {
    if (this.kv) this.device.free(this.kv.base);
    if (this.states) {
      this.device.free(this.states.base);
      this.device.free(this.states.arrivals);
    }
    this.kv = null;
    this.states = null;
  }
}
