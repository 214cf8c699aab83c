// Measured device-to-device copy bandwidth and bf16 GEMM rate: the denominators
// of the bandwidth and compute rooflines.

import type { Device } from './device.js';
import { check, CU_EVENT_DEFAULT, outPtr, type Handle } from './ffi/driver.js';

/** Seconds per call of `op` on the device stream: one untimed call, then `numReps` timed with CUDA events. */
function secondsPerCall(d: Device, op: () => void, numReps: number): number {
  const events: Handle[] = [];
  try {
    for (let i = 0; i < 2; i++) {
      const out: [Handle | null] = [null];
      check(d.api.cuEventCreate(out, CU_EVENT_DEFAULT), 'cuEventCreate');
      events.push(outPtr(out, 'cuEventCreate'));
    }
    op();
    check(d.api.cuEventRecord(events[0]!, d.stream), 'cuEventRecord');
    for (let i = 0; i < numReps; i++) op();
    check(d.api.cuEventRecord(events[1]!, d.stream), 'cuEventRecord');
    check(d.api.cuEventSynchronize(events[1]!), 'cuEventSynchronize');
    const ms: [number] = [0];
    check(d.api.cuEventElapsedTime_v2(ms, events[0]!, events[1]!), 'cuEventElapsedTime');
    return ms[0] / 1000 / numReps;
  } finally {
    for (const e of events) d.api.cuEventDestroy_v2(e);
  }
}

/** Device-to-device copy bandwidth, bytes read + written per second. */
export function copyBandwidth(d: Device, bytes = 1 << 30, numReps = 10): number {
  const [src, dst] = [d.alloc(bytes), d.alloc(bytes)];
  try {
    return (2 * bytes) / secondsPerCall(d, () => d.copyDeviceAsync(dst, src, bytes), numReps);
  } finally {
    d.free(src);
    d.free(dst);
  }
}

/** Buffer sizes to measure copy bandwidth with, largest first: all far beyond L2 (50 MB on an H100). */
export const COPY_BANDWIDTH_BYTES = [1 << 30, 1 << 28, 1 << 27];

/**
 * `measure` at the first size whose buffers fit on the device: after the KV cache has
 * taken its share, 1 GiB buffers may not. Errors other than out-of-memory pass through.
 */
export function firstThatFits(sizes: readonly number[], measure: (bytes: number) => number): number {
  for (const [i, bytes] of sizes.entries()) {
    try {
      return measure(bytes);
    } catch (err) {
      if (i === sizes.length - 1 || !String(err).includes('OUT_OF_MEMORY')) throw err;
    }
  }
  throw new Error('firstThatFits: no sizes');
}

/** bf16 GEMM rate (FLOP/s) of `gemm` on an n x n x n problem. */
export function gemmFlops(d: Device, gemm: (x: bigint, w: bigint, y: bigint, n: number) => void, n = 8192,
  numReps = 10): number {
  const bytes = n * n * 2;
  const [x, w, y] = [d.alloc(bytes), d.alloc(bytes), d.alloc(bytes)];
  try {
    d.fillBytesAsync(x, 0x3c, bytes);
    d.fillBytesAsync(w, 0x3c, bytes);
    return (2 * n * n * n) / secondsPerCall(d, () => gemm(x, w, y, n), numReps);
  } finally {
    for (const p of [x, w, y]) d.free(p);
  }
}
