// Messages, control-word layout and kernel choice shared by MatmulPool and its workers.

import { runAttentionUnit, type AttentionJob } from './attention-wasm.js';
import type { SharedView } from './heap.js';
import { matmulCols } from './kernels.js';
import type { WasmMemory, WasmModule } from './wasm-asm.js';
import type { WasmAttention } from './wasm-attention.js';
import { instantiateWasmMatmul } from './wasm-matmul.js';

/** Int32 slots of the control SharedArrayBuffer. */
export const CONTROL = { generation: 0, numDone: 1, stop: 2, failed: 3, nextChunk: 4, length: 5 } as const;

/** Which matmul code runs, and over what memory (structured-clonable, sent to every worker). */
export type KernelSetup = { kind: 'js' } | { kind: 'wasm'; memory: WasmMemory; module: WasmModule };

/** y = x w^T with operands named by (bufferId, element offset), split into column chunks. */
export interface MatmulJob {
  x: number; xOff: number; w: number; wOff: number; y: number; yOff: number;
  T: number; K: number; N: number; colsPerChunk: number;
  /** w holds bf16 (wasm kernel only). */
  wBf16: boolean;
}

export type PoolMessage =
  | { kind: 'buffer'; id: number; buffer: SharedArrayBuffer }
  | { kind: 'release'; id: number }
  | ({ kind: 'matmul' } & MatmulJob)
  | ({ kind: 'attention'; numUnits: number } & AttentionJob);

/** Columns [n0, n1) of a job. */
export type MatmulKernel = (job: MatmulJob, n0: number, n1: number) => void;

/** `buffers` maps bufferIds to arrays for the 'js' kernel; the wasm kernel addresses its one memory. */
export function makeKernel(setup: KernelSetup, buffers: Map<number, Float32Array>): MatmulKernel {
  if (setup.kind === 'wasm') {
    const matmul = instantiateWasmMatmul(setup.module, setup.memory);
    return (j, n0, n1) => matmul(j.xOff * 4, j.wOff * 4, j.yOff * 4, j.T, j.K, j.N, n0, n1, j.wBf16);
  }
  return (j, n0, n1) => {
    if (j.wBf16) throw new Error('the js matmul kernel takes f32 weights only');
    matmulCols(buffers.get(j.x)!, j.xOff, buffers.get(j.w)!, j.wOff, buffers.get(j.y)!,
      j.yOff, j.T, j.K, j.N, n0, n1);
  };
}

export function jobOf(x: SharedView, w: SharedView, y: SharedView, T: number, K: number, N: number,
  colsPerChunk: number, wBf16: boolean): MatmulJob {
  return { x: x.bufferId, xOff: x.offset, w: w.bufferId, wOff: w.offset, y: y.bufferId, yOff: y.offset,
    T, K, N, colsPerChunk, wBf16 };
}

/** Claims column chunks from the shared counter until none is left (callers race; each chunk runs once). */
export function runChunks(control: Int32Array, kernel: MatmulKernel, job: MatmulJob): void {
  for (;;) {
    const n0 = Atomics.add(control, CONTROL.nextChunk, 1) * job.colsPerChunk;
    if (n0 >= job.N) return;
    kernel(job, n0, Math.min(job.N, n0 + job.colsPerChunk));
  }
}

/** Claims attention units from the shared counter until none is left. */
export function runAttentionUnits(control: Int32Array, kernels: WasmAttention, memory: WasmMemory,
  job: AttentionJob, numUnits: number, threadIndex: number): void {
  for (;;) {
    const unit = Atomics.add(control, CONTROL.nextChunk, 1);
    if (unit >= numUnits) return;
    runAttentionUnit(kernels, memory.buffer, job, unit, threadIndex);
  }
}
