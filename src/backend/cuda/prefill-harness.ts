// Prefill attention kernels launched on their own, outside the engine: device
// buffers for one batch (qkv, one layer of K/V pages, output, step metadata),
// for the benchmark's A/B and the tests of the kernels the engine does not call
// (the CUDA-core kernel on 16-row tiles, and its f32 instantiation).

import { BYTES_PER_ELEMENT, bf16ToF32, f32ToBf16 } from '../../loader/dtype.js';
import type { ForwardBatch } from '../batch.js';
import { prefillKernelShape } from './attention-launch.js';
import { Device, f32, i32, ptr } from './device.js';
import { layoutFor, packStep, packTiles, type MetaLayout } from './step-meta.js';

export interface PrefillShape {
  numHeads: number;
  numKvHeads: number;
  headDim: number;
  blockSize: number;
  numBlocks: number;
}

/**
 * The tensor-core kernel (what the engine runs; `suffix` picks another instantiation of it by
 * name, for experiments), or the CUDA-core one on tiles of `tileRows` rows.
 */
export type PrefillKernel = { kind: 'mma'; suffix?: string } | { kind: 'simt'; tileRows: number };

/** Causal attention FLOPs of a batch: 2 matmuls of 2 flops per multiply-add over each row's visible keys. */
export function prefillFlops(batch: ForwardBatch, numHeads: number, headDim: number): number {
  let numPairs = 0;
  for (let t = 0; t < batch.numTokens; t++) numPairs += batch.positions[t]! + 1;
  return 4 * numPairs * numHeads * headDim;
}

export class PrefillHarness {
  readonly qkvWidth: number;
  readonly layout: MetaLayout;
  readonly numTiles: number;
  private readonly bytesPerElement: number;
  private readonly qkv: bigint;
  private readonly kCache: bigint;
  private readonly vCache: bigint;
  readonly out: bigint;
  private readonly meta: bigint;
  private readonly tileLists = new Map<number, { ptr: bigint; numTiles: number }>();

  constructor(readonly device: Device, readonly batch: ForwardBatch, readonly shape: PrefillShape,
    readonly dtype: 'bf16' | 'f32' = 'bf16') {
    const { numHeads, numKvHeads, headDim, blockSize, numBlocks } = shape;
    this.bytesPerElement = BYTES_PER_ELEMENT[dtype];
    this.qkvWidth = (numHeads + 2 * numKvHeads) * headDim;
    const cacheBytes = numBlocks * blockSize * numKvHeads * headDim * this.bytesPerElement;
    this.qkv = device.alloc(batch.numTokens * this.qkvWidth * this.bytesPerElement);
    this.kCache = device.alloc(cacheBytes);
    this.vCache = device.alloc(cacheBytes);
    this.out = device.alloc(batch.numTokens * numHeads * headDim * this.bytesPerElement);
    device.fillBytesAsync(this.kCache, 0xff, cacheBytes);
    device.fillBytesAsync(this.vCache, 0xff, cacheBytes);
    this.layout = layoutFor(batch, null);
    const words = new Int32Array(this.layout.totalWords);
    this.numTiles = packStep(batch, this.layout, words).numTiles;
    this.meta = device.alloc(words.byteLength);
    this.upload(this.meta, words);
  }

  /** Through pinned memory on the stream, so it is ordered with the fills and launches. */
  private upload(dst: bigint, src: ArrayBufferView): void {
    const host = this.device.hostAlloc(src.byteLength);
    try {
      new Uint8Array(host.view, 0, src.byteLength).set(new Uint8Array(src.buffer, src.byteOffset, src.byteLength));
      this.device.copyToDeviceAsync(dst, host, src.byteLength);
      this.device.synchronize();
    } finally {
      this.device.hostFree(host);
    }
  }

  private metaPtr(wordOffset: number): bigint {
    return this.meta + BigInt(wordOffset * 4);
  }

  /** Rows [row0, row0 + values.length / width) of qkv. */
  uploadQkvRows(row0: number, values: Float32Array): void {
    const data = this.dtype === 'bf16' ? f32ToBf16(values) : values;
    this.upload(this.qkv + BigInt(row0 * this.qkvWidth * this.bytesPerElement), data);
  }

  /** The batch's k/v rows of qkv into the pages (what the engine does before attention). */
  writeKv(): void {
    const { numHeads, numKvHeads, headDim } = this.shape;
    this.device.launch('kv_write.cu', `kv_write_${this.dtype}`, [this.batch.numTokens, 1, 1], 256, [ptr(this.qkv),
      ptr(this.kCache), ptr(this.vCache), ptr(this.metaPtr(this.layout.slotMapping)), i32(numHeads), i32(numKvHeads),
      i32(headDim)]);
  }

  private tileList(tileRows: number): { ptr: bigint; numTiles: number } {
    let list = this.tileLists.get(tileRows);
    if (!list) {
      const words = new Int32Array(2 * (this.batch.numSeqs + Math.ceil(this.batch.numTokens / tileRows)));
      const numTiles = packTiles(this.batch.queryStartLoc, this.batch.numSeqs, tileRows, words, 0);
      list = { ptr: this.device.alloc(words.byteLength), numTiles };
      this.upload(list.ptr, words);
      this.tileLists.set(tileRows, list);
    }
    return list;
  }

  run(kernel: PrefillKernel, scale: number): void {
    const { numHeads, numKvHeads, headDim, blockSize } = this.shape;
    const L = this.layout;
    const tiles = kernel.kind === 'mma' ? { ptr: this.metaPtr(L.tiles), numTiles: this.numTiles }
      : this.tileList(kernel.tileRows);
    if (kernel.kind === 'mma' && this.dtype !== 'bf16') throw new Error('the tensor-core prefill kernel is bf16 only');
    const args = [ptr(this.qkv), ptr(this.kCache), ptr(this.vCache), ptr(this.out), ptr(this.meta),
      ptr(this.metaPtr(L.blockTables)), ptr(tiles.ptr), ptr(this.metaPtr(L.queryStartLoc)),
      ptr(this.metaPtr(L.positions)), i32(numHeads), i32(numKvHeads), i32(blockSize), f32(scale)];
    if (kernel.kind === 'simt') {
      // the CUDA-core kernel: always 4 warps, a head a block
      args.push(i32(kernel.tileRows));
      this.device.launch('attention_prefill.cu', `attention_prefill_simt_${this.dtype}_d${headDim}`,
        [tiles.numTiles, numHeads, 1], 128, args);
      return;
    }
    const k = prefillKernelShape(headDim, numHeads / numKvHeads, kernel.suffix);
    this.device.launch('attention_prefill.cu', k.name, [tiles.numTiles, numHeads / k.headsPerBlock, 1], k.threads,
      args, k.sharedBytes);
  }

  /** Fills the output with `byte` (0xff: NaN), so an element a kernel never wrote shows. */
  poisonOut(byte = 0xff): void {
    const { numHeads, headDim } = this.shape;
    this.device.fillBytesAsync(this.out, byte, this.batch.numTokens * numHeads * headDim * this.bytesPerElement);
  }

  /** Output rows [row0, row0 + numRows) as floats. */
  readOut(row0 = 0, numRows = this.batch.numTokens): Float32Array {
    const width = this.shape.numHeads * this.shape.headDim;
    const bytes = numRows * width * this.bytesPerElement;
    const host = this.device.hostAlloc(bytes);
    try {
      this.device.copyToHostAsync(host, this.out + BigInt(row0 * width * this.bytesPerElement), bytes);
      this.device.synchronize();
      return this.dtype === 'bf16' ? bf16ToF32(new Uint16Array(host.view.slice(0, bytes)))
        : new Float32Array(host.view.slice(0, bytes));
    } finally {
      this.device.hostFree(host);
    }
  }

  dispose(): void {
    this.device.synchronize();
    for (const p of [this.qkv, this.kCache, this.vCache, this.out, this.meta]) this.device.free(p);
    for (const list of this.tileLists.values()) this.device.free(list.ptr);
    this.tileLists.clear();
  }
}
