// Device tensors of the CUDA backend, and the one hand-off between two ops that is not a plain tensor: a GEMM
// input whose RMSNorm scale the GEMM itself applies (NormedTensor, made by matmulAddRmsNorm).

import { BYTES_PER_ELEMENT } from '../../loader/dtype.js';
import type { Tensor } from '../backend.js';

export class CudaTensor implements Tensor {
  /**
   * `scales`: an f8_e4m3 weight's block scales ([N / 128, K / 128] f32, uploadFp8Block); an f8_e4m3 activation's
   * are another tensor.
   */
  constructor(readonly shape: readonly number[], readonly ptr: bigint,
    readonly dtype: 'bf16' | 'f32' | 'f8_e4m3' = 'bf16', readonly scales = 0n) {}

  get numElements(): number {
    return this.shape.reduce((a, b) => a * b, 1);
  }

  get numBytes(): number {
    return this.numElements * BYTES_PER_ELEMENT[this.dtype];
  }

  /** A block-FP8 weight (Backend.uploadFp8Block). */
  get quantized(): 'fp8_block' | undefined {
    return this.scales !== 0n ? 'fp8_block' : undefined;
  }
}

/** What a chain producer left for the next GEMM (matmulAddRmsNorm): the norm's sums, the updated residual. */
export interface PendingNorm {
  /** [T][numParts] f32: each producer block's sums of squares of its rows of the new residual. */
  parts: bigint;
  numParts: number;
  eps: number;
  residual: CudaTensor;
  weight: CudaTensor;
}

/**
 * bf16(residual * w) of a matmulAddRmsNorm: its norm's scale not yet applied, so only matmul and matmulSiluMul take
 * it (a chain consumer applies the scale; any other GEMM first runs the norm kernel on the residual); every other
 * op refuses it (asCuda).
 */
export class NormedTensor extends CudaTensor {
  constructor(shape: readonly number[], ptr: bigint, readonly norm: PendingNorm) {
    super(shape, ptr);
  }
}

/** A [T, K] activation's q8 blocks (kernels/gguf_q8.cuh): int8 values [T, K], (scale, sum) pairs [T, K / 32]. */
export interface Q8Blocks {
  xq: bigint;
  xds: bigint;
}

/**
 * A bf16 activation whose producer (the norm or silu_mul kernel before a GGUF GEMV) also wrote its q8 blocks, so the
 * GEMV reads them instead of quantizing it again. Any other op reads it as the plain tensor it also is.
 */
export class Q8Tensor extends CudaTensor {
  constructor(shape: readonly number[], ptr: bigint, readonly q8: Q8Blocks) {
    super(shape, ptr);
  }
}

/**
 * Backend.columns' view: [T, width] columns of a wider bf16 tensor whose rows are `rowStride` elements apart. Only
 * the ops that read it through asStrided take it (the DeltaNet kernels, which index rows with the stride).
 */
export class ColumnView extends CudaTensor {
  constructor(shape: readonly number[], ptr: bigint, readonly rowStride: number) {
    super(shape, ptr);
  }
}

/**
 * A plain CUDA tensor; throws on another backend's tensor, on a GGUF weight (only matmul takes one), on a
 * NormedTensor (its scale is not applied) and on a view.
 */
export function asCuda(t: Tensor): CudaTensor {
  if (t.quantized === 'gguf') throw new Error('CudaBackend: a GGUF-quantized weight reached an op other than matmul');
  if (!(t instanceof CudaTensor)) throw new Error('CudaBackend: tensor from another backend');
  if (t instanceof NormedTensor) throw new Error('CudaBackend: a GEMM input whose norm is left to that GEMM reached another op');
  if (t instanceof ColumnView) throw new Error('CudaBackend: a column view reached an op that reads rows contiguously');
  return t;
}

/** A [T, N] bf16 tensor's pointer and row stride in elements: a ColumnView's, or a plain tensor's N. */
export function asStrided(t: Tensor): { ptr: bigint; ld: number } {
  if (t instanceof ColumnView) return { ptr: t.ptr, ld: t.rowStride };
  const c = asCuda(t);
  return { ptr: c.ptr, ld: c.shape[1]! };
}
