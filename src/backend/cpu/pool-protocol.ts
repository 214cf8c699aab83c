// Messages and control-word layout shared by MatmulPool and its workers.

import { matmulCols } from './kernels.js';

/** Int32 slots of the control SharedArrayBuffer. */
export const CONTROL = { generation: 0, numDone: 1, stop: 2, failed: 3, nextChunk: 4, length: 5 } as const;

export type PoolMessage =
  | { kind: 'buffer'; id: number; buffer: SharedArrayBuffer }
  | { kind: 'release'; id: number }
  | {
    kind: 'matmul'; x: number; xOff: number; w: number; wOff: number; y: number; yOff: number;
    T: number; K: number; N: number; colsPerChunk: number;
  };

/** Claims column chunks from the shared counter until none is left (callers race; each chunk runs once). */
export function runChunks(control: Int32Array, x: Float32Array, w: Float32Array, y: Float32Array,
  T: number, K: number, N: number, colsPerChunk: number): void {
  for (;;) {
    const n0 = Atomics.add(control, CONTROL.nextChunk, 1) * colsPerChunk;
    if (n0 >= N) return;
    matmulCols(x, 0, w, 0, y, 0, T, K, N, n0, Math.min(N, n0 + colsPerChunk));
  }
}
