// The CPU backend's HiddenCarry (backend.ts): a plain f32 array of rows x width that outlives steps. keep() copies a
// step's rows into it; rows() gathers a step's carryRows out of it into the step's workspace.

import type { HiddenCarry, StepInputs, Tensor } from '../backend.js';
import { asCpu, type CpuTensor } from './tensor.js';

export class CpuHiddenCarry implements HiddenCarry {
  private store = new Float32Array(0);
  private width = 0;
  private numRows = 0;

  /** `alloc`: the backend's step activations (the gathered rows live as long as the step). */
  constructor(private readonly alloc: (shape: number[]) => CpuTensor) {}

  allocate(rows: number, width: number): void {
    if (!(Number.isInteger(rows) && rows > 0 && Number.isInteger(width) && width > 0)) throw new Error(`carry: ${rows} x ${width}`);
    this.store = new Float32Array(rows * width);
    [this.numRows, this.width] = [rows, width];
  }

  keep(x: Tensor): void {
    const xs = asCpu(x);
    const [T, W] = xs.shape as [number, number];
    if (W !== this.width || T > this.numRows) throw new Error(`carry: [${T}, ${W}] into ${this.numRows} rows of ${this.width}`);
    xs.copyF32(0, T * W, this.store, 0);
  }

  rows(step: StepInputs): Tensor {
    const { numTokens, carryRows } = step.batch;
    if (!carryRows) throw new Error('carry: the step has no carryRows');
    const W = this.width;
    const out = this.alloc([numTokens, W]);
    for (let t = 0; t < numTokens; t++) {
      const r = carryRows[t]!;
      if (!(r >= 0 && r < this.numRows)) throw new Error(`carry: row ${r} outside the ${this.numRows} kept`);
      out.data.set(this.store.subarray(r * W, (r + 1) * W), t * W);
    }
    return out;
  }
}
