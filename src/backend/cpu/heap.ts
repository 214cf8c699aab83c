// Where the CPU backend's weights and activations live, so that matmul worker
// threads can read and write them too:
//
//   'wasm': one shared wasm memory (at most 4 GiB), bump-allocated;
//           a view's location is its byte address / 4 (bufferId is always 0)
//   'js':   one SharedArrayBuffer per allocation, registered with the workers
//           under a bufferId; no size limit but the machine's

import { createSharedMemory, WASM_MAX_PAGES, WASM_PAGE_BYTES, type WasmMemory } from './wasm-asm.js';

/** A Float32Array the workers can find: buffer `bufferId`, element `offset`. */
export interface SharedView {
  bufferId: number;
  offset: number;
  data: Float32Array;
}

export interface Heap {
  alloc(numElements: number): SharedView;
  /** Gives back a view; a heap may ignore it. */
  release(view: SharedView): void;
  readonly numBytes: number;
}

export class SabHeap implements Heap {
  numBytes = 0;
  private numBufferIds = 0;

  constructor(private readonly onBuffer: (id: number, buffer: SharedArrayBuffer) => void,
    private readonly onRelease: (id: number) => void) {}

  alloc(numElements: number): SharedView {
    const buffer = new SharedArrayBuffer(Math.max(1, numElements) * 4);
    const bufferId = this.numBufferIds++;
    this.onBuffer(bufferId, buffer);
    this.numBytes += buffer.byteLength;
    return { bufferId, offset: 0, data: new Float32Array(buffer, 0, numElements) };
  }

  release(view: SharedView): void {
    this.numBytes -= view.data.buffer.byteLength;
    this.onRelease(view.bufferId);
  }
}

const ALIGN_BYTES = 64;

export class WasmHeap implements Heap {
  readonly memory: WasmMemory;
  /** Byte address of the first free byte; allocations below it are live. */
  private top = ALIGN_BYTES;

  constructor() {
    this.memory = createSharedMemory(1);
  }

  get numBytes(): number {
    return this.top;
  }

  /** Bytes still addressable above the last allocation. */
  get numFreeBytes(): number {
    return WASM_MAX_PAGES * WASM_PAGE_BYTES - this.top;
  }

  alloc(numElements: number): SharedView {
    const start = this.top;
    const end = start + Math.ceil((Math.max(1, numElements) * 4) / ALIGN_BYTES) * ALIGN_BYTES;
    const numPages = Math.ceil(end / WASM_PAGE_BYTES);
    const numHeldPages = this.memory.buffer.byteLength / WASM_PAGE_BYTES;
    if (numPages > numHeldPages) {
      if (numPages > WASM_MAX_PAGES) {
        throw new Error(`CPU backend: ${end} bytes of weights and activations exceed the 4 GiB a wasm memory can address; use the 'js' matmul kernel (new CpuBackend({ kernel: 'js' }))`);
      }
      this.memory.grow(Math.min(WASM_MAX_PAGES, Math.max(numPages, Math.ceil(numHeldPages * 1.25))) - numHeldPages);
    }
    this.top = end;
    return { bufferId: 0, offset: start / 4, data: new Float32Array(this.memory.buffer, start, numElements) };
  }

  /** Frees the view if it is the last allocation (stack order); otherwise it stays allocated. */
  release(view: SharedView): void {
    const start = view.offset * 4;
    const end = start + Math.ceil((Math.max(1, view.data.length) * 4) / ALIGN_BYTES) * ALIGN_BYTES;
    if (end === this.top) this.top = start;
  }
}
