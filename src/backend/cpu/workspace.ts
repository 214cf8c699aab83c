// Bump allocator for one step's activations, carved out of heap arenas (so matmul
// workers can read and write them). reset() rewinds it; a step that outgrew the
// arena gets one arena big enough for the whole step at the next reset, so a
// steady decode loop reuses the same memory.

import type { Heap, SharedView } from './heap.js';

const ALIGN_ELEMENTS = 16;

export class Workspace {
  private arenas: SharedView[] = [];
  private numUsed = 0;

  constructor(private readonly heap: Heap, private readonly initialElements = 1 << 16) {}

  alloc(numElements: number): SharedView {
    const size = Math.ceil(Math.max(1, numElements) / ALIGN_ELEMENTS) * ALIGN_ELEMENTS;
    let arena = this.arenas[this.arenas.length - 1];
    if (!arena || this.numUsed + size > arena.data.length) {
      arena = this.heap.alloc(Math.max(size, arena ? arena.data.length * 2 : this.initialElements));
      this.arenas.push(arena);
      this.numUsed = 0;
    }
    const offset = this.numUsed;
    this.numUsed += size;
    return { bufferId: arena.bufferId, offset: arena.offset + offset, data: arena.data.subarray(offset, offset + numElements) };
  }

  reset(): void {
    if (this.arenas.length > 1) {
      const total = this.arenas.reduce((n, a) => n + a.data.length, 0);
      for (let i = this.arenas.length - 1; i >= 0; i--) this.heap.release(this.arenas[i]!);
      this.arenas = [this.heap.alloc(total)];
    }
    this.numUsed = 0;
  }
}
