// GGUF projections on the device (Backend.uploadGguf): llama.cpp's blocks, each block's f16 scale d moved out of the
// formats whose blocks are not a multiple of 16 bytes (Q4_0 18, Q8_0 34, Q6_K 210), so that every block body is and a
// kernel reads it with 16-byte loads (kernels/gguf_decode.cuh):
//
//   body   [rows][K / blockElems][bodyBytes]    the block less its d (Q4_K and Q5_K: the whole block)
//   scales [rows][K / blockElems] f16           each block's d (Q4_0, Q8_0, Q6_K only)
//
// Rows stay in order and bodies are whole 16-byte pieces, so the parts of a fused projection concatenate by rows in
// both arrays, and a row's body starts 16-byte aligned.

import type { Tensor } from '../backend.js';
import type { GgufBlockType } from '../../loader/types.js';
import { GGML_TYPES } from '../../loader/gguf-quants.js';

export interface GgufDeviceFormat {
  /** Byte offset of d in a stored block, or null where it stays in the body. */
  dOffset: number | null;
  bodyBytes: number;
  /** Values of a row the dequantize kernel's work item decodes (gguf_decode.cuh's UNIT; the kernels assert they agree). */
  unitElems: number;
  /** The kernels' name for it (gguf_gemv_<kernelName>_m<M>, gguf_dequant_<kernelName>). */
  kernelName: string;
}

export const GGUF_DEVICE_FORMATS: Readonly<Record<GgufBlockType, GgufDeviceFormat>> = {
  Q4_0: { dOffset: 0, bodyBytes: 16, unitElems: 32, kernelName: 'q4_0' },
  Q8_0: { dOffset: 0, bodyBytes: 32, unitElems: 32, kernelName: 'q8_0' },
  Q4_K: { dOffset: null, bodyBytes: 144, unitElems: 64, kernelName: 'q4_k' },
  Q5_K: { dOffset: null, bodyBytes: 176, unitElems: 64, kernelName: 'q5_k' },
  Q6_K: { dOffset: 208, bodyBytes: 208, unitElems: 128, kernelName: 'q6_k' },
};

/** `rows` rows of K values of `type`, stored as GGUF blocks in `data`, in the device layout: body and scales (or null). */
export function ggufDeviceLayout(type: GgufBlockType, data: Uint8Array, rows: number, K: number):
  { body: Uint8Array; scales: Uint8Array | null } {
  const { blockElems, blockBytes } = GGML_TYPES[type];
  const f = GGUF_DEVICE_FORMATS[type];
  const numBlocks = rows * (K / blockElems);
  if (K % blockElems !== 0 || data.byteLength !== numBlocks * blockBytes) {
    throw new Error(`ggufDeviceLayout: ${data.byteLength} bytes are not ${rows} rows of ${K} ${type} values`);
  }
  if (f.dOffset === null) return { body: data, scales: null };
  const body = new Uint8Array(numBlocks * f.bodyBytes);
  const scales = new Uint8Array(numBlocks * 2);
  for (let b = 0; b < numBlocks; b++) {
    const block = data.subarray(b * blockBytes, (b + 1) * blockBytes);
    scales[2 * b] = block[f.dOffset]!;
    scales[2 * b + 1] = block[f.dOffset + 1]!;
    body.set(block.subarray(0, f.dOffset), b * f.bodyBytes);
    body.set(block.subarray(f.dOffset + 2), b * f.bodyBytes + f.dOffset);
  }
  return { body, scales };
}

/** Rows [row0, row0 + rows) of a GGUF weight, all of one block type: pointers to their body and scales (0n: none). */
export interface GgufSegment {
  type: GgufBlockType;
  row0: number;
  rows: number;
  body: bigint;
  scales: bigint;
}

/** What uploadGguf returns: [N, K], its rows in segments of one block type each (a fused projection may mix them). */
export class GgufWeight implements Tensor {
  readonly quantized = 'gguf' as const;
  constructor(readonly shape: readonly number[], readonly segments: readonly GgufSegment[], readonly storedBytes: number) {}
}

/** Bytes of a row's body and of its scales on the device. */
export function ggufRowBytes(type: GgufBlockType, K: number): { body: number; scales: number } {
  const blocks = K / GGML_TYPES[type].blockElems;
  const f = GGUF_DEVICE_FORMATS[type];
  return { body: blocks * f.bodyBytes, scales: f.dOffset === null ? 0 : blocks * 2 };
}

/** Warps of a gguf_gemv block (kernels/gguf.cu). */
export const GGUF_GEMV_WARPS = 4;
/**
 * Weight rows a gguf_gemv warp takes: each token's activations a lane reads serve them all, so at 8 tokens the lanes
 * re-read 4 bytes of q8 a weight, not 8 (from L1: the GPU's L1 moves about 7 times the bytes of its memory).
 */
export const GGUF_GEMV_ROWS = 2;
/** Values of a q8 activation block (kernels/gguf_q8.cuh): the GEMV's K is a multiple of it. */
export const GGUF_Q8_BLOCK = 32;
/** The token counts gguf_gemv is built for (its M); a step of T tokens takes the smallest M >= T, in passes of the last. */
export const GGUF_GEMV_TOKENS: readonly number[] = [1, 2, 4, 8];
