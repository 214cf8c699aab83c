// The CUDA backend's HiddenCarry (backend.ts): one device buffer of parts x rows x width bf16 that outlives steps, part
// after part. keep() is a device-to-device copy on the stream into a part (a memcpy node inside a captured graph);
// rows() gathers the step's carryRows out of a part (packed with its metadata, step-meta.ts, so a replayed graph reads
// the replay's) with embedding.cu's gather_rows.

import type { HiddenCarry, StepInputs, Tensor } from '../backend.js';
import { i32, ptr } from './device.js';
import { metaPtr } from './step-buffers.js';
import type { StepContext } from './step-context.js';
import { asCuda, type CudaTensor } from './tensor.js';

export class CudaHiddenCarry implements HiddenCarry {
  private buffer = 0n;
  private width = 0;
  private numRows = 0;
  private numParts = 0;

  constructor(private readonly s: StepContext) {}

  allocate(rows: number, width: number, parts = 1): void {
    if (this.s.capturing) throw new Error('carry: allocated during graph capture');
    if (![rows, width, parts].every((n) => Number.isInteger(n) && n > 0)) throw new Error(`carry: ${parts} x ${rows} x ${width}`);
    this.dispose();
    this.buffer = this.s.device.alloc(parts * rows * width * 2);
    [this.numRows, this.width, this.numParts] = [rows, width, parts];
  }

  /** Part `part`'s first byte. */
  private base(part: number): bigint {
    if (this.buffer === 0n) throw new Error('carry: used before allocate()');
    if (!(Number.isInteger(part) && part >= 0 && part < this.numParts)) throw new Error(`carry: part ${part} of ${this.numParts}`);
    return this.buffer + BigInt(part * this.numRows * this.width * 2);
  }

  keep(x: Tensor, part = 0): void {
    const xs = asCuda(x);
    const [T, W] = [xs.shape[0]!, xs.shape[1]!];
    if (xs.dtype !== 'bf16' || W !== this.width || T > this.numRows) {
      throw new Error(`carry: ${xs.dtype} [${T}, ${W}] into ${this.numRows} rows of ${this.width}`);
    }
    const to = this.base(part);
    if (T > 0) this.s.timed('copies', () => this.s.device.copyDeviceAsync(to, xs.ptr, T * W * 2));
  }

  rows(step: StepInputs, part = 0): CudaTensor {
    const { batch, meta, layout } = this.s.of(step);
    if (!batch.carryRows) throw new Error('carry: the step has no carryRows');
    const from = this.base(part);
    const out = this.s.act([batch.numTokens, this.width]);
    this.s.timed('copies', () => this.s.device.launch('embedding.cu', 'gather_rows_bf16', [batch.numTokens, 1, 1], 256,
      [ptr(from), ptr(metaPtr(meta, layout.carryRows)), ptr(out.ptr), i32(this.width)], 0, true));
    return out;
  }

  dispose(): void {
    if (this.buffer !== 0n) this.s.device.free(this.buffer);
    this.buffer = 0n;
  }
}
