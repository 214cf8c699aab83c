// Pinned host staging for device -> host reads, and bf16 <-> f32 on the host.

import type { Device, PinnedBuffer } from './device.js';

/** f32 bits of each bf16 value (exact). */
export function bf16BytesToF32(src: ArrayBuffer, numElements: number): Float32Array {
  const halves = new Uint16Array(src, 0, numElements);
  const out = new Float32Array(numElements);
  const bits = new Uint32Array(out.buffer);
  for (let i = 0; i < numElements; i++) bits[i] = halves[i]! << 16;
  return out;
}

/** Grows only outside graph capture: a captured copy keeps the address it saw. */
export class HostStaging {
  private buffer: PinnedBuffer | null = null;
  generation = 0;

  constructor(private readonly device: Device) {}

  ensure(bytes: number, frozen: boolean): PinnedBuffer {
    if (this.buffer && this.buffer.bytes >= bytes) return this.buffer;
    if (frozen) throw new Error(`host staging outgrown during graph capture (${bytes} bytes)`);
    if (this.buffer) {
      this.device.synchronize();
      this.device.hostFree(this.buffer);
    }
    let size = 1 << 20;
    while (size < bytes) size *= 2;
    this.buffer = this.device.hostAlloc(size);
    this.generation++;
    return this.buffer;
  }

  dispose(): void {
    if (this.buffer) this.device.hostFree(this.buffer);
    this.buffer = null;
  }
}
