// How a block-FP8 weight lies on the device (CudaBackend.uploadFp8Block, kernels/quant_fp8.cu, kernels/gemm_chain.cu's
// _fp8 builds, cuBLASLt's BLK128x128_32F scales): the parts' e4m3 rows concatenated, and their scales as the checkpoint
// stores them, row-major [N / 128, K / 128], each row padded to 16 bytes (cuBLASLt's layout).

import { FP8_BLOCK } from '../fp8-linear.js';
import type { Fp8BlockPart } from '../backend.js';

/** Floats a row of a block-FP8 weight's scales takes on the device: K / 128 padded to 16 bytes. */
export function fp8ScaleRowFloats(K: number): number {
  return Math.ceil(K / FP8_BLOCK / 4) * 4;
}

/**
 * The parts' shape [N, K] and their scales in the device's layout; throws naming the first part that is not e4m3
 * [n, K] of whole 128 x 128 blocks with f32 scales [n / 128, K / 128].
 */
export function fp8DeviceScales(name: string, parts: readonly Fp8BlockPart[]): { N: number; K: number; scales: Float32Array } {
  const K = parts[0]?.weight.shape[1] ?? 0;
  let N = 0;
  for (const { weight, scaleInv } of parts) {
    const [n = 0, k] = weight.shape;
    if (weight.dtype !== 'f8_e4m3' || weight.shape.length !== 2 || k !== K || n % FP8_BLOCK !== 0 || K % FP8_BLOCK !== 0 ||
      weight.data.byteLength !== n * K || scaleInv.dtype !== 'f32' || scaleInv.shape.join() !== [n / FP8_BLOCK, K / FP8_BLOCK].join() ||
      scaleInv.data.byteLength !== n * K / FP8_BLOCK ** 2 * 4) {
      throw new Error(`uploadFp8Block ${name}: ${weight.name} ${weight.dtype} [${weight.shape.join(', ')}] with scales ` +
        `${scaleInv.dtype} [${scaleInv.shape.join(', ')}] (expected f8_e4m3 [n, ${K}], n and K multiples of 128, f32 [n / 128, K / 128])`);
    }
    N += n;
  }
  const rowFloats = fp8ScaleRowFloats(K);
  const scales = new Float32Array(N / FP8_BLOCK * rowFloats);
  let row = 0;
  for (const { weight, scaleInv } of parts) {
    const s = new Float32Array(scaleInv.data.slice().buffer);
    for (let r = 0; r < weight.shape[0]! / FP8_BLOCK; r++) {
      scales.set(s.subarray(r * (K / FP8_BLOCK), (r + 1) * (K / FP8_BLOCK)), (row / FP8_BLOCK + r) * rowFloats);
    }
    row += weight.shape[0]!;
  }
  return { N, K, scales };
}
