// Whether a CUDA device can be used here, without throwing: for `--backend auto`
// and for tests that skip on machines without a GPU.

import { cu } from './ffi/driver.js';

export type CudaProbe = { ok: true; numDevices: number } | { ok: false; reason: string };

export function cudaAvailable(): CudaProbe {
  try {
    const api = cu();
    const status = api.cuInit(0);
    if (status !== 0) return { ok: false, reason: `cuInit returned ${status} (no usable GPU or driver)` };
    const count: [number] = [0];
    if (api.cuDeviceGetCount(count) !== 0 || count[0] === 0) return { ok: false, reason: 'no CUDA device' };
    return { ok: true, numDevices: count[0] };
  } catch (err) {
    return { ok: false, reason: (err as Error).message.split('\n')[0]! };
  }
}
