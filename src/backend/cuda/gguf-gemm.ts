// GEMMs on GGUF weights kept as llama.cpp's blocks (GgufWeight, gguf-layout.ts). A decode step's few tokens run
// kernels/gguf.cu's GEMV on their activations quantized to q8 blocks (kernels/gguf_q8.cuh: once a step's input, by
// gguf_quantize_q8, unless its producer wrote them: a Q8Tensor), which reads each weight block once for all of them
// (in passes of 8 tokens), one launch a segment of one block type, each writing its columns of the output. Larger
// steps (up to QUIRE_GGUF_GEMV_TOKENS is the GEMV's share) dequantize the weight to a bf16 scratch, in slices of rows
// where it is large, and run the backend's bf16 matmul on it (cuBLASLt), each slice's columns copied into place. The
// batch-invariant mode always takes the bf16 path (its gemm_rows kernel), so it never sees q8 activations.

import { readKnob } from '../../knobs/knobs.js';
import { i32, ptr } from './device.js';
import { GGUF_DEVICE_FORMATS, GGUF_GEMV_ROWS, GGUF_GEMV_TOKENS, GGUF_GEMV_WARPS, GGUF_Q8_BLOCK, ggufRowBytes,
  type GgufWeight } from './gguf-layout.js';
import type { StepContext } from './step-context.js';
import { CudaTensor, Q8Tensor, type Q8Blocks } from './tensor.js';

export interface GgufGemmOptions {
  batchInvariant: boolean;
  /** QUIRE_GGUF_GEMV_TOKENS: the most tokens on the GEMV. */
  gemvMaxTokens?: number;
  /** QUIRE_GGUF_DEQUANT_MIB in bytes: the largest bf16 scratch of a dequantized weight. */
  scratchBytes?: number;
}

/** y = x w^T on bf16 weights, the backend's matmul (CudaGemms.matmul). */
export type Bf16Matmul = (x: CudaTensor, w: CudaTensor, label: string, bias: CudaTensor | null) => CudaTensor;

export class CudaGgufGemm {
  private readonly batchInvariant: boolean;
  private readonly gemvMaxTokens: number;
  private readonly scratchBytes: number;

  constructor(private readonly s: StepContext, private readonly matmulBf16: Bf16Matmul, o: GgufGemmOptions) {
    this.batchInvariant = o.batchInvariant;
    this.gemvMaxTokens = o.gemvMaxTokens ?? readKnob('QUIRE_GGUF_GEMV_TOKENS');
    this.scratchBytes = o.scratchBytes ?? readKnob('QUIRE_GGUF_DEQUANT_MIB') * 2 ** 20;
  }

  /** y[T, N] = x[T, K] w[N, K]^T (+ bias[N] before the rounding), bf16. */
  matmul(x: CudaTensor, w: GgufWeight, label: string, bias: CudaTensor | null): CudaTensor {
    const [T, K] = [x.shape[0]!, x.shape[1]!];
    const N = w.shape[0]!;
    if (w.shape[1] !== K) throw new Error(`matmul ${label}: x [${x.shape.join(', ')}], GGUF w [${w.shape.join(', ')}]`);
    if (bias && bias.numElements !== N) throw new Error(`matmul ${label}: bias [${bias.shape.join(', ')}] for ${N} outputs`);
    if (T === 0) return this.s.act([0, N]);
    if (!this.takesGemv(T)) return this.viaBf16(x, w, label, bias);
    const out = this.s.act([T, N]);
    const q8 = x instanceof Q8Tensor ? x.q8 : this.quantize(x);
    const maxM = GGUF_GEMV_TOKENS.at(-1)!;
    const rowsPerBlock = GGUF_GEMV_WARPS * GGUF_GEMV_ROWS;
    this.s.timed(`gemm ${label}`, () => {
      for (let t0 = 0; t0 < T; t0 += maxM) {
        const numTokens = Math.min(maxM, T - t0);
        const M = GGUF_GEMV_TOKENS.find((m) => m >= numTokens)!;
        for (const seg of w.segments) {
          this.s.device.launch('gguf.cu', `gguf_gemv_${GGUF_DEVICE_FORMATS[seg.type].kernelName}_m${M}`,
            [Math.ceil(seg.rows / rowsPerBlock), 1, 1], GGUF_GEMV_WARPS * 32,
            [ptr(seg.body), ptr(seg.scales), ptr(q8.xq + BigInt(t0 * K)), ptr(q8.xds + BigInt((t0 * K / GGUF_Q8_BLOCK) * 8)),
              ptr(out.ptr + BigInt((t0 * N + seg.row0) * 2)), ptr(bias ? bias.ptr + BigInt(seg.row0 * 2) : 0n),
              i32(numTokens), i32(seg.rows), i32(K), i32(N)], 0, true);
        }
      }
    });
    return out;
  }

  /** Whether a step of T tokens runs the GEMV (so its input is read as q8 blocks). */
  takesGemv(T: number): boolean {
    return !this.batchInvariant && T > 0 && T <= this.gemvMaxTokens;
  }

  /** Workspace for the q8 blocks of [T, K] activations (K a multiple of 32). */
  allocQ8(T: number, K: number): Q8Blocks {
    if (K % GGUF_Q8_BLOCK !== 0) throw new Error(`q8 activations of ${K} columns: not whole blocks of ${GGUF_Q8_BLOCK}`);
    return { xq: this.s.act([T, K], 'f8_e4m3').ptr, xds: this.s.act([T, (K / GGUF_Q8_BLOCK) * 2], 'f32').ptr };
  }

  /** x [T, K] as q8 blocks (kernels/gguf.cu's gguf_quantize_q8). */
  private quantize(x: CudaTensor): Q8Blocks {
    const [T, K] = [x.shape[0]!, x.shape[1]!];
    const q8 = this.allocQ8(T, K);
    const groups = (T * K) / 8;
    this.s.timed('quantize', () => this.s.device.launch('gguf.cu', 'gguf_quantize_q8', [Math.ceil(groups / 256), 1, 1], 256,
      [ptr(x.ptr), ptr(q8.xq), ptr(q8.xds), i32(groups)], 0, true));
    return q8;
  }

  /** The bf16 GEMM on the weight dequantized, whole or in slices of rows that fit the scratch. */
  private viaBf16(x: CudaTensor, w: GgufWeight, label: string, bias: CudaTensor | null): CudaTensor {
    const [T, K] = [x.shape[0]!, x.shape[1]!];
    const N = w.shape[0]!;
    const sliceRows = Math.max(16, Math.floor(this.scratchBytes / (K * 2) / 16) * 16);
    if (N <= sliceRows) {
      const scratch = this.s.act([N, K]);
      this.dequantize(w, 0, N, scratch);
      return this.matmulBf16(x, scratch, label, bias);
    }
    const out = this.s.act([T, N]);
    const scratch = this.s.act([sliceRows, K]);
    for (let n0 = 0; n0 < N; n0 += sliceRows) {
      const rows = Math.min(sliceRows, N - n0);
      this.dequantize(w, n0, rows, scratch);
      const part = this.matmulBf16(x, new CudaTensor([rows, K], scratch.ptr), label,
        bias ? new CudaTensor([rows], bias.ptr + BigInt(n0 * 2)) : null);
      this.s.timed(`gemm ${label}`, () => this.s.device.launch('gguf.cu', 'gguf_copy_columns',
        [Math.ceil((T * rows) / 256), 1, 1], 256, [ptr(part.ptr), ptr(out.ptr + BigInt(n0 * 2)), i32(T), i32(rows), i32(N)],
        0, true));
    }
    return out;
  }

  /** Rows [n0, n0 + rows) of w as bf16 into out [rows, K], a launch for each segment they meet. */
  private dequantize(w: GgufWeight, n0: number, rows: number, out: CudaTensor): void {
    const K = w.shape[1]!;
    this.s.timed('dequantize', () => {
      for (const seg of w.segments) {
        const lo = Math.max(n0, seg.row0), hi = Math.min(n0 + rows, seg.row0 + seg.rows);
        if (lo >= hi) continue;
        const f = GGUF_DEVICE_FORMATS[seg.type];
        const rowBytes = ggufRowBytes(seg.type, K);
        const units = (hi - lo) * (K / f.unitElems);
        this.s.device.launch('gguf.cu', `gguf_dequant_${f.kernelName}`, [Math.ceil(units / 256), 1, 1], 256,
          [ptr(seg.body + BigInt((lo - seg.row0) * rowBytes.body)),
            ptr(seg.scales === 0n ? 0n : seg.scales + BigInt((lo - seg.row0) * rowBytes.scales)),
            ptr(out.ptr + BigInt((lo - n0) * K * 2)), i32(hi - lo), i32(K)], 0, true);
      }
    });
  }
}
