// The tensor-core prefill attention kernel launched on its own, outside the
// engine: device buffers for one batch (qkv, one layer of K/V pages, output,
// step metadata), for the benchmark, its digests and the tests that compare the
// kernel's instantiations (the engine picks one per GQA group).

import { BYTES_PER_ELEMENT, bf16ToF32, f32ToBf16 } from '../loader/dtype.js';
import type { ForwardBatch } from '../backend/batch.js';
import { prefillKernelShape } from '../backend/cuda/attention-launch.js';
import { Device, f32, i32, ptr } from '../backend/cuda/device.js';
import { layoutFor, packStep, type MetaLayout } from '../backend/cuda/step-meta.js';

export interface PrefillShape {
  numHeads: number;
  numKvHeads: number;
  headDim: number;
  blockSize: number;
  numBlocks: number;
}

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
  private readonly bytesPerElement = BYTES_PER_ELEMENT.bf16;
  private readonly qkv: bigint;
  private readonly kCache: bigint;
  private readonly vCache: bigint;
  readonly out: bigint;
  private readonly meta: bigint;

  constructor(readonly device: Device, readonly batch: ForwardBatch, readonly shape: PrefillShape) {
    const { numHeads, numKvHeads, headDim, blockSize, numBlocks } = shape;
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
    this.upload(this.qkv + BigInt(row0 * this.qkvWidth * this.bytesPerElement), f32ToBf16(values));
  }

  /** The batch's k/v rows of qkv into the pages (what the engine does before attention). */
  writeKv(): void {
    const { numHeads, numKvHeads, headDim } = this.shape;
    this.device.launch('kv_write.cu', 'kv_write_bf16', [this.batch.numTokens, 1, 1], 256, [ptr(this.qkv),
      ptr(this.kCache), ptr(this.vCache), ptr(this.metaPtr(this.layout.slotMapping)), i32(numHeads), i32(numKvHeads),
      i32(headDim)]);
  }

  /**
   * The tensor-core kernel the engine runs for this shape, or with `suffix` another instantiation of it
   * (attention-launch.ts PREFILL_CONFIGS lists them).
   */
  run(scale: number, suffix?: string): void {
    const { numHeads, numKvHeads, headDim, blockSize } = this.shape;
    const L = this.layout;
    const k = prefillKernelShape(headDim, numHeads / numKvHeads, suffix);
    this.device.launch('attention_prefill.cu', k.name, [this.numTiles, numHeads / k.headsPerBlock, 1], k.threads,
      [ptr(this.qkv), ptr(this.kCache), ptr(this.vCache), ptr(this.out), ptr(this.meta),
        ptr(this.metaPtr(L.blockTables)), ptr(this.metaPtr(L.tiles)), ptr(this.metaPtr(L.queryStartLoc)),
        ptr(this.metaPtr(L.positions)), i32(numHeads), i32(numKvHeads), i32(blockSize), f32(scale)], k.sharedBytes);
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
      return bf16ToF32(new Uint16Array(host.view.slice(0, bytes)));
    } finally {
      this.device.hostFree(host);
    }
  }

  dispose(): void {
    this.device.synchronize();
    for (const p of [this.qkv, this.kCache, this.vCache, this.out, this.meta]) this.device.free(p);
  }
}
