// CPU tensors: f32 activations and weights; under the wasm kernel, 2-D bf16
// weights stay bf16 (half the memory traffic; widened exactly in the kernel).

import type { Tensor } from '../backend.js';
import type { SharedView } from './heap.js';

export class CpuTensor implements Tensor {
  readonly numElements: number;

  constructor(readonly shape: readonly number[], readonly view: SharedView,
    readonly dtype: 'f32' | 'bf16' = 'f32') {
    this.numElements = shape.reduce((a, b) => a * b, 1);
  }

  /** The f32 elements; only for f32 tensors. */
  get data(): Float32Array {
    if (this.dtype !== 'f32') throw new Error(`CpuBackend: op needs an f32 tensor, got ${this.dtype}`);
    return this.view.data;
  }

  /** Elements [start, end) as f32, written to out at outOffset. */
  copyF32(start: number, end: number, out: Float32Array, outOffset: number): void {
    if (this.dtype === 'f32') {
      out.set(this.view.data.subarray(start, end), outOffset);
      return;
    }
    const bits = new Uint16Array(this.view.data.buffer, this.view.data.byteOffset + start * 2, end - start);
    const outBits = new Uint32Array(out.buffer, out.byteOffset + outOffset * 4, end - start);
    for (let i = 0; i < bits.length; i++) outBits[i] = bits[i]! << 16;
  }
}

export function asCpu(t: Tensor): CpuTensor {
  if (!(t instanceof CpuTensor)) throw new Error('CpuBackend: tensor from another backend');
  return t;
}

/** bf16 is the high half of an f32: widen straight into the destination. */
export function bf16BytesInto(src: Uint8Array, out: Uint32Array): void {
  if (src.byteOffset % 2 === 0) {
    const halves = new Uint16Array(src.buffer, src.byteOffset, out.length);
    for (let i = 0; i < out.length; i++) out[i] = halves[i]! << 16;
  } else {
    for (let i = 0; i < out.length; i++) out[i] = (src[2 * i]! | (src[2 * i + 1]! << 8)) << 16;
  }
}
