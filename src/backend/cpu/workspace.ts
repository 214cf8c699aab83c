// Bump allocator for one step's activations over SharedArrayBuffers (so matmul
// workers can read and write them). reset() rewinds it; a step that outgrew the
// arena gets one arena big enough for the whole step at the next reset, so a
// steady decode loop reuses the same buffers.

import type { SharedView } from './matmul-pool.js';

interface Arena {
  id: number;
  data: Float32Array;
}

const ALIGN_ELEMENTS = 16;

export class Workspace {
  private arenas: Arena[] = [];
  private numUsed = 0;

  constructor(
    private readonly newBufferId: () => number,
    private readonly onBuffer: (id: number, buffer: SharedArrayBuffer) => void,
    private readonly onRelease: (id: number) => void,
    initialElements = 1 << 16,
  ) {
    this.arenas.push(this.createArena(initialElements));
  }

  alloc(numElements: number): SharedView {
    const size = Math.ceil(Math.max(1, numElements) / ALIGN_ELEMENTS) * ALIGN_ELEMENTS;
    let arena = this.arenas[this.arenas.length - 1]!;
    if (this.numUsed + size > arena.data.length) {
      arena = this.createArena(Math.max(size, arena.data.length * 2));
      this.arenas.push(arena);
      this.numUsed = 0;
    }
    const offset = this.numUsed;
    this.numUsed += size;
    return { bufferId: arena.id, offset, data: arena.data.subarray(offset, offset + numElements) };
  }

  reset(): void {
    if (this.arenas.length > 1) {
      let total = 0;
      for (const a of this.arenas) {
        total += a.data.length;
        this.onRelease(a.id);
      }
      this.arenas = [this.createArena(total)];
    }
    this.numUsed = 0;
  }

  get numBytes(): number {
    return this.arenas.reduce((sum, a) => sum + a.data.byteLength, 0);
  }

  private createArena(numElements: number): Arena {
    const buffer = new SharedArrayBuffer(numElements * 4);
    const id = this.newBufferId();
    this.onBuffer(id, buffer);
    return { id, data: new Float32Array(buffer) };
  }
}
