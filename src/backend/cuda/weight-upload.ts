// Weight upload at load time: checkpoint bytes (byte ranges of tensors: weight-parts.ts) are read straight into two
// pinned staging buffers in turn and copied to the device asynchronously, so reading chunk i+1 from the file overlaps
// the DMA of chunk i, with no host copy of a whole tensor (and no row concatenation or row pick on the host for fused
// or cut weights).

import type { ByteSegment, WeightSource } from '../../loader/types.js';
import type { Device, PinnedBuffer } from './device.js';
import { check, CU_EVENT_DISABLE_TIMING, outPtr, type Handle } from './ffi/driver.js';

const CHUNK_BYTES = 64 << 20;

export class WeightUploader {
  private readonly buffers: PinnedBuffer[] = [];
  private readonly events: Handle[] = [];
  private readonly pending = [false, false];
  private next = 0;

  constructor(private readonly device: Device, private readonly chunkBytes = CHUNK_BYTES) {
    for (let i = 0; i < 2; i++) {
      this.buffers.push(device.hostAlloc(chunkBytes));
      const ev: [Handle | null] = [null];
      check(device.api.cuEventCreate(ev, CU_EVENT_DISABLE_TIMING), 'cuEventCreate');
      this.events.push(outPtr(ev, 'cuEventCreate'));
    }
  }

  /** Copies `segments` of `source`, back to back, to device memory at `dst`; returns the bytes written. */
  upload(dst: bigint, source: WeightSource, segments: readonly ByteSegment[]): number {
    const readInto = source.readInto!.bind(source);
    let at = 0;
    for (const { name, offset: begin, bytes } of segments) {
      for (let offset = 0; offset < bytes; offset += this.chunkBytes) {
        const len = Math.min(this.chunkBytes, bytes - offset);
        const i = this.next;
        this.next = 1 - i;
        if (this.pending[i]) check(this.device.api.cuEventSynchronize(this.events[i]!), 'cuEventSynchronize');
        readInto(name, begin + offset, new Uint8Array(this.buffers[i]!.view, 0, len));
        this.device.copyToDeviceAsync(dst + BigInt(at + offset), this.buffers[i]!, len);
        check(this.device.api.cuEventRecord(this.events[i]!, this.device.stream), 'cuEventRecord');
        this.pending[i] = true;
      }
      at += bytes;
    }
    return at;
  }

  /** Waits for the last copies and frees the staging buffers. */
  dispose(): void {
    this.device.synchronize();
    for (const b of this.buffers) this.device.hostFree(b);
    for (const e of this.events) this.device.api.cuEventDestroy_v2(e);
    this.buffers.length = 0;
  }
}
