// Communicator for ranks that are threads of one process (worker_threads), on host typed arrays: the reference the
// sharding arithmetic is tested against without a GPU. Each rank owns a slot of one SharedArrayBuffer; a collective
// copies this rank's chunk into its slot, meets the others at a barrier, reads the slots it needs, and meets them
// again so that no slot is overwritten while another rank still reads it. Messages larger than a slot go in chunks.
//
// Sums run over ranks in rank order, in f32 (bf16 and f16 rounded once at the end), so every rank gets the same
// bits. A rank that waits longer than timeoutMs at a barrier aborts the group: every rank's next wait throws,
// instead of a test hanging on a rank that died.

import { bf16BitsToF32, f16BitsToF32, f32ToBf16Bits, f32ToF16Bits } from '../loader/dtype.js';
import { COMM_DTYPE_BYTES, type CommDType, type Communicator } from './comm.js';

/** A host buffer of a CommDType: Float32Array (f32), Uint16Array (bf16 / f16 bit patterns), Int32Array (i32). */
export type HostBuffer = Float32Array | Uint16Array | Int32Array;

/** What the ranks share: structured-clonable, posted to each rank's worker. */
export interface CpuCommGroup {
  size: number;
  slotBytes: number;
  timeoutMs: number;
  /** Int32: arrivals at the barrier, its generation, the abort flag. */
  control: SharedArrayBuffer;
  /** size x slotBytes. */
  slots: SharedArrayBuffer;
}

const ARRIVED = 0;
const GENERATION = 1;
const ABORTED = 2;

export function createCpuCommGroup(size: number, opts: { slotBytes?: number; timeoutMs?: number } = {}): CpuCommGroup {
  if (!Number.isInteger(size) || size < 1) throw new Error(`communicator size ${size} is not a positive integer`);
  const slotBytes = opts.slotBytes ?? 1 << 20;
  if (slotBytes < 8 || slotBytes % 8 !== 0) throw new Error(`slotBytes ${slotBytes} is not a positive multiple of 8`);
  return { size, slotBytes, timeoutMs: opts.timeoutMs ?? 60_000, control: new SharedArrayBuffer(16),
    slots: new SharedArrayBuffer(size * slotBytes) };
}

const ARRAY_OF: Record<CommDType, { name: string; of: (b: HostBuffer) => boolean }> = {
  f32: { name: 'Float32Array', of: (b) => b instanceof Float32Array },
  bf16: { name: 'Uint16Array', of: (b) => b instanceof Uint16Array },
  f16: { name: 'Uint16Array', of: (b) => b instanceof Uint16Array },
  i32: { name: 'Int32Array', of: (b) => b instanceof Int32Array },
};

export class CpuCommunicator implements Communicator<HostBuffer> {
  readonly size: number;
  private readonly control: Int32Array;
  private readonly chunkBytes: number;
  private destroyed = false;

  constructor(private readonly group: CpuCommGroup, readonly rank: number) {
    if (!Number.isInteger(rank) || rank < 0 || rank >= group.size) throw new Error(`rank ${rank} is not in [0, ${group.size})`);
    this.size = group.size;
    this.control = new Int32Array(group.control);
    this.chunkBytes = group.slotBytes;
  }

  /** Slot r's first n elements of dtype's array type. */
  private slot(r: number, dtype: CommDType, n: number): HostBuffer {
    const at = r * this.group.slotBytes;
    if (dtype === 'f32') return new Float32Array(this.group.slots, at, n);
    if (dtype === 'i32') return new Int32Array(this.group.slots, at, n);
    return new Uint16Array(this.group.slots, at, n);
  }

  private check(call: string, dtype: CommDType, ...bufs: [HostBuffer, number][]): number {
    if (this.destroyed) throw new Error(`${call} on a destroyed communicator (rank ${this.rank})`);
    for (const [b, need] of bufs) {
      if (!ARRAY_OF[dtype].of(b)) throw new Error(`${call}: ${dtype} needs a ${ARRAY_OF[dtype].name}, got ${b.constructor.name}`);
      if (b.length < need) throw new Error(`${call}: buffer of ${b.length} elements, need ${need}`);
    }
    return Math.floor(this.chunkBytes / COMM_DTYPE_BYTES[dtype]);
  }

  allReduceSum(buf: HostBuffer, count: number, dtype: CommDType): void {
    const chunk = this.check('allReduceSum', dtype, [buf, count]);
    const decode = dtype === 'bf16' ? bf16BitsToF32 : dtype === 'f16' ? f16BitsToF32 : null;
    const encode = dtype === 'bf16' ? f32ToBf16Bits : f32ToF16Bits;
    for (let off = 0; off < count; off += chunk) {
      const n = Math.min(chunk, count - off);
      this.slot(this.rank, dtype, n).set(buf.subarray(off, off + n));
      this.barrier('allReduceSum');
      const slots = Array.from({ length: this.size }, (_, r) => this.slot(r, dtype, n));
      for (let i = 0; i < n; i++) {
        let acc = 0;
        for (const s of slots) {
          const x = s[i]!;
          acc = dtype === 'i32' ? (acc + x) | 0 : Math.fround(acc + (decode ? decode(x) : x));
        }
        buf[off + i] = decode ? encode(acc) : acc;
      }
      this.barrier('allReduceSum');
    }
  }

  allGather(send: HostBuffer, recv: HostBuffer, count: number, dtype: CommDType): void {
    const chunk = this.check('allGather', dtype, [send, count], [recv, this.size * count]);
    for (let off = 0; off < count; off += chunk) {
      const n = Math.min(chunk, count - off);
      this.slot(this.rank, dtype, n).set(send.subarray(off, off + n));
      this.barrier('allGather');
      for (let r = 0; r < this.size; r++) recv.set(this.slot(r, dtype, n), r * count + off);
      this.barrier('allGather');
    }
  }

  broadcast(buf: HostBuffer, count: number, dtype: CommDType, root: number): void {
    const chunk = this.check('broadcast', dtype, [buf, count]);
    if (!Number.isInteger(root) || root < 0 || root >= this.size) throw new Error(`broadcast: root ${root} is not a rank`);
    for (let off = 0; off < count; off += chunk) {
      const n = Math.min(chunk, count - off);
      if (this.rank === root) this.slot(root, dtype, n).set(buf.subarray(off, off + n));
      this.barrier('broadcast');
      if (this.rank !== root) buf.set(this.slot(root, dtype, n), off);
      this.barrier('broadcast');
    }
  }

  /** Makes every rank's current and next wait throw (a rank that failed, so the others do not wait out the timeout). */
  abort(): void {
    Atomics.store(this.control, ABORTED, 1);
    Atomics.add(this.control, GENERATION, 0);
    Atomics.notify(this.control, GENERATION);
  }

  destroy(): void {
    this.destroyed = true;
  }

  /**
   * Sense by generation: read the generation, arrive; the last to arrive resets the count and opens the next
   * generation. A rank leaves only once the generation moved, and the count was reset before that, so a rank that
   * hurries into the next barrier counts toward it.
   */
  private barrier(call: string): void {
    const c = this.control;
    const generation = Atomics.load(c, GENERATION);
    this.throwIfAborted(call);
    if (Atomics.add(c, ARRIVED, 1) === this.size - 1) {
      Atomics.store(c, ARRIVED, 0);
      Atomics.add(c, GENERATION, 1);
      Atomics.notify(c, GENERATION);
      return;
    }
    const deadline = Date.now() + this.group.timeoutMs;
    while (Atomics.load(c, GENERATION) === generation) {
      this.throwIfAborted(call);
      const left = deadline - Date.now();
      if (left <= 0) {
        this.abort();
        throw new Error(`${call}: rank ${this.rank} waited ${this.group.timeoutMs} ms for the other ranks; group aborted`);
      }
      Atomics.wait(c, GENERATION, generation, Math.min(left, 50));
    }
  }

  private throwIfAborted(call: string): void {
    if (Atomics.load(this.control, ABORTED) !== 0) throw new Error(`${call}: the communicator group was aborted (rank ${this.rank})`);
  }
}
