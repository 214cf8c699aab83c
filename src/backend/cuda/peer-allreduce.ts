// The one-shot all-reduce over peer memory (kernels/allreduce.cu), as vLLM's custom all-reduce: every rank maps every
// other rank's region (CUDA IPC between processes; the pointer itself, with peer access, between threads of one
// process) and sums the ranks' copies in one kernel with one barrier. Hand-written because it is the product's decode
// latency under tensor parallelism: NCCL's all-reduce of a decode step's activations (8 to 512 KiB) takes 13-19 us
// on 2 H200s (docs/perf-log.md, session 30, call 4), and an 8b model makes 72 of them a step.
//
// Ranks set it up together (create(), a collective through the `exchange` their communicator provides) and launch it
// for the same sizes at the same points, as they do NCCL's; a size it does not take (over its buffer, or not whole
// 16-byte chunks) is the caller's to send to NCCL, on every rank alike since every rank asks with the same size.

import { BYTES_PER_ELEMENT } from '../../loader/dtype.js';
import type { Device } from './device.js';
import {
  check, CU_IPC_HANDLE_BYTES, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS, CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED, outPtr,
  type Handle,
} from './ffi/driver.js';
import { PEER_AR_BLOCKS, PEER_AR_DATA_OFFSET, PEER_AR_MAX_RANKS, PEER_AR_THREADS } from './kernel-defines.js';

/** What a rank tells the others about its region: its IPC handle, its address, process and device. */
const RECORD_BYTES = CU_IPC_HANDLE_BYTES + 16;

/** All ranks' records, in rank order, from each rank's own (a collective: an all-gather over the communicator). */
export type Exchange = (mine: Uint8Array) => Uint8Array[];

export type PeerDType = 'bf16' | 'f32';

export class PeerAllReduce {
  private constructor(private readonly device: Device, readonly rank: number, readonly size: number,
    /** Bytes each staging buffer holds: the largest all-reduce this takes. */
    readonly capBytes: number, private readonly own: bigint, private readonly regionTable: bigint,
    private readonly opened: bigint[]) {}

  /**
   * Maps every rank's region on this one. Null, with the reason, where one-shot cannot run here: more ranks than it
   * serves, or a device pair without peer access (NCCL then takes every size). Every rank gets the same answer:
   * the reasons are decided from what all ranks exchanged.
   */
  static create(device: Device, rank: number, size: number, capBytes: number, exchange: Exchange):
    { allReduce: PeerAllReduce | null; reason: string } {
    if (size > PEER_AR_MAX_RANKS) return { allReduce: null, reason: `${size} ranks (it serves up to ${PEER_AR_MAX_RANKS})` };
    if (capBytes % 16 !== 0) throw new Error(`peer all-reduce buffer of ${capBytes} bytes: not 16-byte chunks`);
    const api = device.api;
    const regionBytes = PEER_AR_DATA_OFFSET + 2 * capBytes;
    const own = device.alloc(regionBytes);
    check(api.cuMemsetD8_v2(own, 0, regionBytes), 'cuMemsetD8_v2');  // flags and counters start at 0 on every rank
    const record = new Uint8Array(RECORD_BYTES);
    check(api.cuIpcGetMemHandle(record, own), 'cuIpcGetMemHandle');
    const tail = new DataView(record.buffer, CU_IPC_HANDLE_BYTES);
    tail.setBigUint64(0, own, true);
    tail.setUint32(8, process.pid, true);
    tail.setUint32(12, device.ordinal, true);
    const cuDevice = (ordinal: number): number => {
      const d: [number] = [0];
      check(api.cuDeviceGet(d, ordinal), 'cuDeviceGet');
      return d[0];
    };
    const peers = exchange(record).map((r) => {
      const v = new DataView(r.buffer, r.byteOffset + CU_IPC_HANDLE_BYTES, 16);
      const ordinal = v.getUint32(12, true);
      return { handle: r.subarray(0, CU_IPC_HANDLE_BYTES), ptr: v.getBigUint64(0, true), pid: v.getUint32(8, true),
        ordinal, dev: cuDevice(ordinal) };
    });
    // the same verdict on every rank: any pair of the group without peer access keeps every rank on NCCL
    for (const a of peers) {
      for (const b of peers) {
        if (a === b) continue;
        const can: [number] = [0];
        check(api.cuDeviceCanAccessPeer(can, a.dev, b.dev), 'cuDeviceCanAccessPeer');
        if (can[0] !== 1) {
          device.free(own);
          return { allReduce: null, reason: `device ${a.ordinal} cannot access device ${b.ordinal}'s memory` };
        }
      }
    }
    const opened: bigint[] = [];
    const regions = peers.map((p, r) => {
      if (r === rank) return own;
      if (p.pid === process.pid) {
        // a rank in a thread of this process: its pointer as is, once this context may reach its device's
        const ctx: [Handle | null] = [null];
        check(api.cuDevicePrimaryCtxRetain(ctx, p.dev), 'cuDevicePrimaryCtxRetain');
        const status = api.cuCtxEnablePeerAccess(outPtr(ctx, 'cuDevicePrimaryCtxRetain'), 0);
        api.cuDevicePrimaryCtxRelease_v2(p.dev);
        if (status !== CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED) check(status, 'cuCtxEnablePeerAccess', `device ${p.ordinal}`);
        return p.ptr;
      }
      const out: [Handle | null] = [null];
      check(api.cuIpcOpenMemHandle_v2(out, { reserved: p.handle }, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS),
        'cuIpcOpenMemHandle', `rank ${r}'s region`);
      const ptr = outPtr(out, 'cuIpcOpenMemHandle');
      opened.push(ptr);
      return ptr;
    });
    const table = device.alloc(8 * size);
    device.upload(table, BigUint64Array.from(regions));
    return { allReduce: new PeerAllReduce(device, rank, size, capBytes, own, table, opened), reason: '' };
  }

  /** Whether it takes an all-reduce of `count` elements (every rank answers alike for the same count). */
  takes(count: number, dtype: PeerDType): boolean {
    const bytes = count * BYTES_PER_ELEMENT[dtype];
    return bytes <= this.capBytes && bytes % 16 === 0;
  }

  /**
   * Sums `count` elements at `ptr` (16-byte aligned) over the ranks, in place, on the device's stream; false, and
   * nothing launched, where it does not take them (the caller's NCCL does).
   */
  allReduceSum(ptr: bigint, count: number, dtype: PeerDType): boolean {
    if (!this.takes(count, dtype)) return false;
    this.device.launch('allreduce.cu', `peer_all_reduce_${dtype}`, [PEER_AR_BLOCKS, 1, 1], PEER_AR_THREADS, [
      { ptr }, { i32: count }, { ptr: this.regionTable }, { i32: this.rank }, { i32: this.size }, { i32: this.capBytes },
    ]);
    return true;
  }

  /** Unmaps the peers' regions and frees this rank's (after the stream is idle). */
  dispose(): void {
    this.device.synchronize();
    for (const p of this.opened) this.device.api.cuIpcCloseMemHandle(p);
    this.opened.length = 0;
    this.device.free(this.regionTable);
    this.device.free(this.own);
  }
}
