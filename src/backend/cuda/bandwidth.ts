// Measured device-to-device copy bandwidth and bf16 GEMM rate: the denominators
// of the bandwidth and compute rooflines.

import type { Device } from './device.js';
import { check, CU_EVENT_DEFAULT, outPtr, type Handle } from './ffi/driver.js';

/** Device-to-device copy bandwidth, bytes read + written per second. */
export function copyBandwidth(d: Device, bytes = 1 << 30, numReps = 10): number {
  const src = d.alloc(bytes);
  const dst = d.alloc(bytes);
  const events: Handle[] = [];
  for (let i = 0; i < 2; i++) {
    const out: [Handle | null] = [null];
    check(d.api.cuEventCreate(out, CU_EVENT_DEFAULT), 'cuEventCreate');
    events.push(outPtr(out, 'cuEventCreate'));
  }
  try {
    d.copyDeviceAsync(dst, src, bytes);
    check(d.api.cuEventRecord(events[0]!, d.stream), 'cuEventRecord');
    for (let i = 0; i < numReps; i++) d.copyDeviceAsync(dst, src, bytes);
    check(d.api.cuEventRecord(events[1]!, d.stream), 'cuEventRecord');
    check(d.api.cuEventSynchronize(events[1]!), 'cuEventSynchronize');
    const ms: [number] = [0];
    check(d.api.cuEventElapsedTime_v2(ms, events[0]!, events[1]!), 'cuEventElapsedTime');
    return (2 * bytes * numReps) / (ms[0] / 1000);
  } finally {
    for (const e of events) d.api.cuEventDestroy_v2(e);
    d.free(src);
    d.free(dst);
  }
}

/** bf16 GEMM rate (FLOP/s) of `gemm` on an n x n x n problem, timed with CUDA events. */
export function gemmFlops(d: Device, gemm: (x: bigint, w: bigint, y: bigint, n: number) => void, n = 8192,
  numReps = 10): number {
  const bytes = n * n * 2;
  const [x, w, y] = [d.alloc(bytes), d.alloc(bytes), d.alloc(bytes)];
  d.fillBytesAsync(x, 0x3c, bytes);
  d.fillBytesAsync(w, 0x3c, bytes);
  const events: Handle[] = [];
  for (let i = 0; i < 2; i++) {
    const out: [Handle | null] = [null];
    check(d.api.cuEventCreate(out, CU_EVENT_DEFAULT), 'cuEventCreate');
    events.push(outPtr(out, 'cuEventCreate'));
  }
  try {
    gemm(x, w, y, n);
    check(d.api.cuEventRecord(events[0]!, d.stream), 'cuEventRecord');
    for (let i = 0; i < numReps; i++) gemm(x, w, y, n);
    check(d.api.cuEventRecord(events[1]!, d.stream), 'cuEventRecord');
    check(d.api.cuEventSynchronize(events[1]!), 'cuEventSynchronize');
    const ms: [number] = [0];
    check(d.api.cuEventElapsedTime_v2(ms, events[0]!, events[1]!), 'cuEventElapsedTime');
    return (2 * n * n * n * numReps) / (ms[0] / 1000);
  } finally {
    for (const e of events) d.api.cuEventDestroy_v2(e);
    for (const p of [x, w, y]) d.free(p);
  }
}
