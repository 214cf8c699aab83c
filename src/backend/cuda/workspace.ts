// Bump allocator for one step's activations over device memory. reset() rewinds
// it; a step that outgrew the arena spills into extra chunks and gets one arena
// big enough for the whole step at the next reset, so a steady loop (and every
// captured graph) sees the same addresses step after step, with no cuMemAlloc.
//
// StepWorkspace adds two layer arenas used in turn (layer l allocates from
// arena l % 2, rewound as the layer begins): what layer l-1 produced stays
// intact while layer l runs, and a step's activations take two layers' worth
// of memory instead of numLayers' worth. What every layer of a step reads (the
// rope angles) comes from the step arena (allocForStep), never rewound mid-step.

const ALIGN_BYTES = 256;
/** Largest spill chunk beyond what the allocation itself needs. */
const SPILL_CAP_BYTES = 64 * 2 ** 20;

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
  private chunkIndex = 0;
  private numUsedBytes = 0;
  /** Bytes handed out in the chunks before the current one since the last rewind. */
  private numUsedBeforeBytes = 0;
  /** The most bytes handed out between two rewinds since the arena was last replaced: what one arena needs. */
  private peakBytes = 0;
  /** Bumped whenever the arena is replaced: addresses handed out before are gone. */
  generation = 0;
  /** Set while a graph is being captured: growing then would put cuMemAlloc into the capture. */
  frozen = false;

  constructor(private readonly memory: DeviceMemory, initialBytes: number) {
    this.chunks = [{ ptr: memory.alloc(initialBytes), bytes: initialBytes }];
  }

  alloc(bytes: number): bigint {
    const size = Math.ceil(Math.max(1, bytes) / ALIGN_BYTES) * ALIGN_BYTES;
    let chunk = this.chunks[this.chunkIndex]!;
    if (this.numUsedBytes + size > chunk.bytes) {
      const next = this.chunks[this.chunkIndex + 1];
      if (next && size <= next.bytes) {
        chunk = next;
      } else {
        if (this.frozen) throw new Error(`activation workspace outgrown during graph capture (${size} bytes more)`);
        // doubling converges fast from a small start, but never more than SPILL_CAP_BYTES beyond the need: a
        // large arena that falls a little short must not ask for its own size again
        const newBytes = Math.max(size, Math.min(this.chunks[this.chunks.length - 1]!.bytes * 2, SPILL_CAP_BYTES));
        chunk = { ptr: this.memory.alloc(newBytes), bytes: newBytes };
        this.chunks.splice(this.chunkIndex + 1, 0, chunk);
      }
      this.chunkIndex++;
      this.numUsedBeforeBytes += this.numUsedBytes;
      this.numUsedBytes = 0;
    }
    const p = chunk.ptr + BigInt(this.numUsedBytes);
    this.numUsedBytes += size;
    this.peakBytes = Math.max(this.peakBytes, this.numUsedBeforeBytes + this.numUsedBytes);
    return p;
  }

  /** Hands out the same addresses again, in the same order (what was there is dead). */
  rewind(): void {
    this.chunkIndex = 0;
    this.numUsedBytes = 0;
    this.numUsedBeforeBytes = 0;
  }

  /** Rewinds; an arena that spilled is replaced by one of the most bytes any step took (not the spills' sum). */
  reset(): void {
    if (this.chunks.length > 1 && !this.frozen) {
      const total = Math.max(this.peakBytes, this.chunks[0]!.bytes);
      for (const c of this.chunks) this.memory.free(c.ptr);
      this.chunks = [{ ptr: this.memory.alloc(total), bytes: total }];
      this.generation++;
    }
    this.rewind();
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

/** The step arena plus two layer arenas (see the top of this file); same interface as DeviceWorkspace. */
export class StepWorkspace {
  private readonly step: DeviceWorkspace;
  private readonly layers: [DeviceWorkspace, DeviceWorkspace];
  private active: DeviceWorkspace;

  constructor(memory: DeviceMemory, initialBytes: number) {
    this.step = new DeviceWorkspace(memory, initialBytes);
    this.layers = [new DeviceWorkspace(memory, initialBytes), new DeviceWorkspace(memory, initialBytes)];
    this.active = this.step;
  }

  private get all(): DeviceWorkspace[] {
    return [this.step, ...this.layers];
  }

  alloc(bytes: number): bigint {
    return this.active.alloc(bytes);
  }

  /** From the step arena even inside a layer: for what every layer of the step reads. */
  allocForStep(bytes: number): bigint {
    return this.step.alloc(bytes);
  }

  beginLayer(layer: number): void {
    this.active = this.layers[layer % 2]!;
    this.active.rewind();
  }

  endLayers(): void {
    this.active = this.step;
  }

  /** Between steps only (merging frees chunks: the device must be idle when needsMerge). */
  reset(): void {
    for (const w of this.all) w.reset();
    this.active = this.step;
  }

  get generation(): string {
    return this.all.map((w) => w.generation).join('.');
  }

  get frozen(): boolean {
    return this.step.frozen;
  }

  set frozen(value: boolean) {
    for (const w of this.all) w.frozen = value;
  }

  get needsMerge(): boolean {
    return this.all.some((w) => w.needsMerge);
  }

  get numBytes(): number {
    return this.all.reduce((sum, w) => sum + w.numBytes, 0);
  }

  fill(fn: (ptr: bigint, bytes: number) => void): void {
    for (const w of this.all) w.fill(fn);
  }

  dispose(): void {
    for (const w of this.all) w.dispose();
  }
}
