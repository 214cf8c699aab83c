// CUDA-event timing of a run of launches on the device's stream between two events, one untimed launch first, so its
// time is the GPU's, whatever the host does meanwhile (as long as it launches faster than the GPU runs): the lab's
// kernel benchmarks (bench-prefill, bench-moe, bench-gemm, bench-deltanet) and the cuBLASLt tuner (gemm-tune.ts).

import type { Device } from './device.js';
import { check, CU_EVENT_DEFAULT, outPtr, type Handle } from './ffi/driver.js';

export class EventTimer {
  private readonly events: Handle[] = [];

  constructor(private readonly device: Device) {
    for (let i = 0; i < 2; i++) {
      const out: [Handle | null] = [null];
      check(device.api.cuEventCreate(out, CU_EVENT_DEFAULT), 'cuEventCreate');
      this.events.push(outPtr(out, 'cuEventCreate'));
    }
  }

  /** Milliseconds a launch of `launch` takes on the GPU, averaged over `numReps` after one untimed launch. */
  time(numReps: number, launch: () => void): number {
    const { api, stream } = this.device;
    const [start, end] = this.events as [Handle, Handle];
    launch();
    check(api.cuEventRecord(start, stream), 'cuEventRecord');
    for (let i = 0; i < numReps; i++) launch();
    check(api.cuEventRecord(end, stream), 'cuEventRecord');
    check(api.cuEventSynchronize(end), 'cuEventSynchronize');
    const ms: [number] = [0];
    check(api.cuEventElapsedTime_v2(ms, start, end), 'cuEventElapsedTime');
    return ms[0] / numReps;
  }

  dispose(): void {
    for (const e of this.events) this.device.api.cuEventDestroy_v2(e);
    this.events.length = 0;
  }
}
