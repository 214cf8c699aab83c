// Block-FP8 weights on the CPU backend: the e4m3 values held as f32 beside their block scales, multiplied as the
// reference fp8BlockMatmul does (W8A8, src/model/fp8-linear.ts). It emulates the GPU's arithmetic for tests and
// parity runs; it is not a fast path (plain TypeScript on the calling thread).

import { bytesToF32 } from '../../loader/dtype.js';
import { FP8_BLOCK, fp8BlockMatmul } from '../fp8-linear.js';
import type { Fp8BlockPart, Tensor } from '../backend.js';

export class CpuFp8Tensor implements Tensor {
  readonly quantized = 'fp8_block';

  /** values: the e4m3 weight [N, K] as f32; scaleInv: [N / 128, ceil(K / 128)]. */
  constructor(readonly shape: readonly [number, number], readonly values: Float32Array, readonly scaleInv: Float32Array) {}

  /** y [T, N] = fp8BlockMatmul(x [T, K], this), written to out. */
  matmulInto(x: Float32Array, T: number, out: Float32Array): void {
    const [N, K] = this.shape;
    out.set(fp8BlockMatmul(x, T, K, this.values, this.scaleInv, N));
  }
}

/** The rows of parts concatenated, scale rows likewise (each part's rows a multiple of 128: whole blocks). */
export function fp8BlockTensor(name: string, parts: readonly Fp8BlockPart[]): CpuFp8Tensor {
  const K = parts[0]?.weight.shape[1] ?? 0;
  const groups = Math.ceil(K / FP8_BLOCK);
  for (const { weight, scaleInv } of parts) {
    const [n = 0, k] = weight.shape;
    if (weight.dtype !== 'f8_e4m3' || weight.shape.length !== 2 || k !== K || n % FP8_BLOCK !== 0) {
      throw new Error(`uploadFp8Block ${name}: part ${weight.name} is ${weight.dtype} [${weight.shape.join(', ')}], ` +
        `expected f8_e4m3 [a multiple of ${FP8_BLOCK}, ${K}]`);
    }
    if (scaleInv.dtype !== 'f32' || scaleInv.shape.join() !== [n / FP8_BLOCK, groups].join()) {
      throw new Error(`uploadFp8Block ${name}: scales ${scaleInv.name} are ${scaleInv.dtype} [${scaleInv.shape.join(', ')}], ` +
        `expected f32 [${n / FP8_BLOCK}, ${groups}]`);
    }
  }
  const N = parts.reduce((rows, p) => rows + p.weight.shape[0]!, 0);
  const values = new Float32Array(N * K);
  const scaleInv = new Float32Array((N / FP8_BLOCK) * groups);
  let row = 0;
  for (const p of parts) {
    values.set(bytesToF32('f8_e4m3', p.weight.data), row * K);
    scaleInv.set(bytesToF32('f32', p.scaleInv.data), (row / FP8_BLOCK) * groups);
    row += p.weight.shape[0]!;
  }
  return new CpuFp8Tensor([N, K], values, scaleInv);
}
