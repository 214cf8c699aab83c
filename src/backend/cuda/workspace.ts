// Bump allocator for one step's activations over device memory. reset() rewinds
// it; a step that outgrew the arena spills into extra chunks and gets one arena
// big enough for the whole step at the next reset, so a steady loop (and every
// captured graph) sees the same addresses step after step, with no cuMemAlloc.

const ALIGN_BYTES = 256;

export interface DeviceMemory {
  alloc(bytes: number): bigint;
  free(ptr: bigint): void;
}

interface Chunk {
  ptr: bigint;
  bytes: number;
}

export class DeviceWorkspace {
  private chunks: Chunk[];
  private numUsedBytes = 0;
  /** Bumped whenever the arena is replaced: addresses handed out before are gone. */
  generation = 0;
  /** Set while a graph is being captured: growing then would put cuMemAlloc into the capture. */
  frozen = false;

  constructor(private readonly memory: DeviceMemory, initialBytes: number) {
    this.chunks = [{ ptr: memory.alloc(initialBytes), bytes: initialBytes }];
  }

  alloc(bytes: number): bigint {
    const size = Math.ceil(Math.max(1, bytes) / ALIGN_BYTES) * ALIGN_BYTES;
    let chunk = this.chunks[this.chunks.length - 1]!;
    if (this.numUsedBytes + size > chunk.bytes) {
      if (this.frozen) throw new Error(`activation workspace outgrown during graph capture (${size} bytes more)`);
      const newBytes = Math.max(size, chunk.bytes * 2);
      chunk = { ptr: this.memory.alloc(newBytes), bytes: newBytes };
      this.chunks.push(chunk);
      this.numUsedBytes = 0;
    }
    const p = chunk.ptr + BigInt(this.numUsedBytes);
    this.numUsedBytes += size;
    return p;
  }

  reset(): void {
    if (this.chunks.length > 1 && !this.frozen) {
      const total = this.chunks.reduce((sum, c) => sum + c.bytes, 0);
      for (const c of this.chunks) this.memory.free(c.ptr);
      this.chunks = [{ ptr: this.memory.alloc(total), bytes: total }];
      this.generation++;
    }
    this.numUsedBytes = 0;
  }

  fill(fn: (ptr: bigint, bytes: number) => void): void {
    for (const c of this.chunks) fn(c.ptr, c.bytes);
  }

  /** The next reset() replaces the arena (the device must be idle by then). */
  get needsMerge(): boolean {
    return this.chunks.length > 1 && !this.frozen;
  }

  get numBytes(): number {
    return this.chunks.reduce((sum, c) => sum + c.bytes, 0);
  }

  dispose(): void {
    for (const c of this.chunks) this.memory.free(c.ptr);
    this.chunks = [];
  }
}
