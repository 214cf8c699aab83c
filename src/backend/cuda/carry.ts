// The CUDA backend's HiddenCarry (backend.ts): one device buffer of rows x width bf16 that outlives steps. keep() is a
// device-to-device copy on the stream (a memcpy node inside a captured graph); rows() gathers the step's carryRows
// (packed with its metadata, step-meta.ts, so a replayed graph reads the replay's) with embedding.cu's gather_rows.

import type { HiddenCarry, StepInputs, Tensor } from '../backend.js';
import { i32, ptr } from './device.js';
import { metaPtr } from './step-buffers.js';
import type { StepContext } from './step-context.js';
import { asCuda, type CudaTensor } from './tensor.js';

export class CudaHiddenCarry implements HiddenCarry {
  private buffer = 0n;
  private width = 0;
  private numRows = 0;

  constructor(private readonly s: StepContext) {}

  allocate(rows: number, width: number): void {
    if (this.s.capturing) throw new Error('carry: allocated during graph capture');
    if (!(Number.isInteger(rows) && rows > 0 && Number.isInteger(width) && width > 0)) throw new Error(`carry: ${rows} x ${width}`);
    this.dispose();
    this.buffer = this.s.device.alloc(rows * width * 2);
    [this.numRows, this.width] = [rows, width];
  }

  keep(x: Tensor): void {
    const xs = asCuda(x);
    const [T, W] = [xs.shape[0]!, xs.shape[1]!];
    if (xs.dtype !== 'bf16' || W !== this.width || T > this.numRows) {
      throw new Error(`carry: ${xs.dtype} [${T}, ${W}] into ${this.numRows} rows of ${this.width}`);
    }
    if (T > 0) this.s.timed('copies', () => this.s.device.copyDeviceAsync(this.buffer, xs.ptr, T * W * 2));
  }

  rows(step: StepInputs): CudaTensor {
    const { batch, meta, layout } = this.s.of(step);
    if (!batch.carryRows) throw new Error('carry: the step has no carryRows');
    if (this.buffer === 0n) throw new Error('carry: rows() before allocate()');
    const out = this.s.act([batch.numTokens, this.width]);
    this.s.timed('copies', () => this.s.device.launch('embedding.cu', 'gather_rows_bf16', [batch.numTokens, 1, 1], 256,
      [ptr(this.buffer), ptr(metaPtr(meta, layout.carryRows)), ptr(out.ptr), i32(this.width)], 0, true));
    return out;
  }

  dispose(): void {
    if (this.buffer !== 0n) this.s.device.free(this.buffer);
    this.buffer = 0n;
  }
}
