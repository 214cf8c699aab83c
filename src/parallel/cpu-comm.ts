// Communicator for ranks that are threads of one process (worker_threads), on host typed arrays: the reference the
// sharding arithmetic is tested against without a GPU. Each rank owns a slot of one SharedArrayBuffer; a collective
// copies this rank's chunk into its slot, meets the others at a barrier, reads the slots it needs, and meets them
// again so that no slot is overwritten while another rank still reads it. Messages larger than a slot go in chunks.
//
// Sums run over ranks in rank order, in f32 (bf16 and f16 rounded once at the end), so every rank gets the same
// bits. A rank that waits longer than timeoutMs at a barrier aborts the group: every rank's next wait throws,
// instead of a test hanging on a rank that died. A rank that fails aborts the group with its reason, which every
// rank's throw then names (the engine's thread, blocked in a receive, cannot read the failed rank's message).
//
// Point to point (a group made with p2p: pipeline stages): a mailbox of one slot for each ordered pair of ranks,
// empty or full. A send waits until its mailbox is empty, fills it and goes on; its recv waits until it is full,
// empties it. A message larger than a slot goes chunk by chunk, so a sender is at most one slot ahead.

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
  /** The abort's reason: its length in bytes (an Int32), then its UTF-8. */
  reason: SharedArrayBuffer;
  /** Point to point: an Int32 a mailbox (0 empty, 1 full), src x size + dst; null without p2p. */
  mailState: SharedArrayBuffer | null;
  /** size x size x slotBytes: the mailboxes' slots. */
  mail: SharedArrayBuffer | null;
}

const ARRIVED = 0;
const GENERATION = 1;
const ABORTED = 2;
const REASON_BYTES = 1024;

export function createCpuCommGroup(size: number, opts: { slotBytes?: number; timeoutMs?: number; p2p?: boolean } = {}): CpuCommGroup {
  if (!Number.isInteger(size) || size < 1) throw new Error(`communicator size ${size} is not a positive integer`);
  const slotBytes = opts.slotBytes ?? 1 << 20;
  if (slotBytes < 8 || slotBytes % 8 !== 0) throw new Error(`slotBytes ${slotBytes} is not a positive multiple of 8`);
  return { size, slotBytes, timeoutMs: opts.timeoutMs ?? 60_000, control: new SharedArrayBuffer(16),
    slots: new SharedArrayBuffer(size * slotBytes), reason: new SharedArrayBuffer(4 + REASON_BYTES),
    mailState: opts.p2p ? new SharedArrayBuffer(4 * size * size) : null,
    mail: opts.p2p ? new SharedArrayBuffer(size * size * slotBytes) : null };
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

  /** Slot r's first n elements of dtype's array type (of `buffer`: the collectives' slots, or the mailboxes'). */
  private slot(r: number, dtype: CommDType, n: number, buffer: SharedArrayBuffer = this.group.slots): HostBuffer {
    const at = r * this.group.slotBytes;
    if (dtype === 'f32') return new Float32Array(buffer, at, n);
    if (dtype === 'i32') return new Int32Array(buffer, at, n);
    return new Uint16Array(buffer, at, n);
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

  send(buf: HostBuffer, count: number, dtype: CommDType, peer: number): void {
    this.p2p('send', buf, count, dtype, peer, 0);
  }

  recv(buf: HostBuffer, count: number, dtype: CommDType, peer: number): void {
    this.p2p('recv', buf, count, dtype, peer, 1);
  }

  /** Chunk by chunk through the mailbox of (sender, receiver): each waits for its state (`ready`), then flips it. */
  private p2p(call: 'send' | 'recv', buf: HostBuffer, count: number, dtype: CommDType, peer: number, ready: 0 | 1): void {
    const chunk = this.check(call, dtype, [buf, count]);
    const { mail, mailState } = this.group;
    if (mail === null || mailState === null) throw new Error(`${call}: this communicator group was made without p2p`);
    if (!Number.isInteger(peer) || peer < 0 || peer >= this.size || peer === this.rank) {
      throw new Error(`${call}: peer ${peer} is not another rank of ${this.size}`);
    }
    const box = call === 'send' ? this.rank * this.size + peer : peer * this.size + this.rank;
    const state = new Int32Array(mailState);
    for (let off = 0; off < count; off += chunk) {
      const n = Math.min(chunk, count - off);
      this.waitFor(state, box, ready, `${call} ${call === 'send' ? 'to' : 'from'} rank ${peer}`);
      if (call === 'send') this.slot(box, dtype, n, mail).set(buf.subarray(off, off + n));
      else buf.set(this.slot(box, dtype, n, mail), off);
      Atomics.store(state, box, 1 - ready);
      Atomics.notify(state, box);
    }
  }

  /** Waits until state[i] is `value` (the abort and the timeout as the barrier's). */
  private waitFor(state: Int32Array, i: number, value: number, call: string): void {
    const deadline = Date.now() + this.group.timeoutMs;
    for (;;) {
      this.throwIfAborted(call);
      const now = Atomics.load(state, i);
      if (now === value) return;
      const left = deadline - Date.now();
      if (left <= 0) {
        this.abort(`rank ${this.rank} waited ${this.group.timeoutMs} ms in ${call}`);
        throw new Error(`${call}: rank ${this.rank} waited ${this.group.timeoutMs} ms; group aborted`);
      }
      Atomics.wait(state, i, now, Math.min(left, 50));
    }
  }

  /**
   * Makes every rank's current and next wait throw (a rank that failed, so the others do not wait out the timeout);
   * `reason`, where given, is in their errors (the first abort's only).
   */
  abort(reason?: string): void {
    const length = new Int32Array(this.group.reason, 0, 1);
    // the first reason is kept: claimed (-1), written, then its length, all before the group reads as aborted
    if (reason !== undefined && Atomics.load(this.control, ABORTED) === 0 && Atomics.compareExchange(length, 0, 0, -1) === 0) {
      const bytes = new TextEncoder().encode(reason).subarray(0, REASON_BYTES);
      new Uint8Array(this.group.reason, 4, REASON_BYTES).set(bytes);
      Atomics.store(length, 0, bytes.length);
    }
    Atomics.store(this.control, ABORTED, 1);
    Atomics.add(this.control, GENERATION, 0);
    Atomics.notify(this.control, GENERATION);
    if (this.group.mailState) {
      const state = new Int32Array(this.group.mailState);
      for (let i = 0; i < state.length; i++) Atomics.notify(state, i);
    }
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
    if (Atomics.load(this.control, ABORTED) === 0) return;
    const length = Atomics.load(new Int32Array(this.group.reason, 0, 1), 0);
    // a copy: TextDecoder does not read shared memory
    const reason = length > 0 ? `: ${new TextDecoder().decode(new Uint8Array(this.group.reason, 4, length).slice())}` : '';
    throw new Error(`${call}: the communicator group was aborted (rank ${this.rank})${reason}`);
  }
}
