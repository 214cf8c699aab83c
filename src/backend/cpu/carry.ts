// The CPU backend's HiddenCarry (backend.ts): a plain f32 array of parts x rows x width that outlives steps. keep()
// copies a step's rows into a part; rows() gathers a step's carryRows out of a part into the step's workspace.

import type { HiddenCarry, StepInputs, Tensor } from '../backend.js';
import { asCpu, type CpuTensor } from './tensor.js';

export class CpuHiddenCarry implements HiddenCarry {
  private store = new Float32Array(0);
  private width = 0;
  private numRows = 0;
  private numParts = 0;

  /** `alloc`: the backend's step activations (the gathered rows live as long as the step). */
  constructor(private readonly alloc: (shape: number[]) => CpuTensor) {}

  allocate(rows: number, width: number, parts = 1): void {
    if (![rows, width, parts].every((n) => Number.isInteger(n) && n > 0)) throw new Error(`carry: ${parts} x ${rows} x ${width}`);
    this.store = new Float32Array(parts * rows * width);
    [this.numRows, this.width, this.numParts] = [rows, width, parts];
  }

  /** Where part `part` begins in the store. */
  private base(part: number): number {
    if (!(Number.isInteger(part) && part >= 0 && part < this.numParts)) throw new Error(`carry: part ${part} of ${this.numParts}`);
    return part * this.numRows * this.width;
  }

  keep(x: Tensor, part = 0): void {
    const xs = asCpu(x);
    const [T, W] = xs.shape as [number, number];
    if (W !== this.width || T > this.numRows) throw new Error(`carry: [${T}, ${W}] into ${this.numRows} rows of ${this.width}`);
    xs.copyF32(0, T * W, this.store, this.base(part));
  }

  rows(step: StepInputs, part = 0): Tensor {
    const { numTokens, carryRows } = step.batch;
    if (!carryRows) throw new Error('carry: the step has no carryRows');
    const W = this.width;
    const base = this.base(part);
    const out = this.alloc([numTokens, W]);
    for (let t = 0; t < numTokens; t++) {
      const r = carryRows[t]!;
      if (!(r >= 0 && r < this.numRows)) throw new Error(`carry: row ${r} outside the ${this.numRows} kept`);
      out.data.set(this.store.subarray(base + r * W, base + (r + 1) * W), t * W);
    }
    return out;
  }
}
