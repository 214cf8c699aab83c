// Communicator over NCCL: device pointers, enqueued on the rank's stream. Imported only dynamically (comm.ts), so that
// nothing on a single-GPU path opens libnccl.

import {
  checkNccl, ncclApi, ncclBfloat16, ncclCommInit, ncclFloat16, ncclFloat32, ncclInt32, ncclSum, NcclError,
} from '../backend/cuda/ffi/nccl.js';
import type { Handle } from '../backend/cuda/ffi/driver.js';
import type { CommDType, Communicator } from './comm.js';

const NCCL_DTYPE: Record<CommDType, number> = { f32: ncclFloat32, bf16: ncclBfloat16, f16: ncclFloat16, i32: ncclInt32 };

export interface NcclCommunicatorOptions {
  rank: number;
  size: number;
  /** ncclUniqueId from rank 0 (ncclUniqueId() / createNcclUniqueId), the same bytes on every rank. */
  id: Uint8Array;
  /** The stream collectives are enqueued on: the backend's (Device.stream), so they order with its kernels. */
  stream: Handle;
}

export class NcclCommunicator implements Communicator<bigint> {
  readonly rank: number;
  readonly size: number;
  private readonly stream: Handle;
  private comm: Handle | null;
  private readonly api = ncclApi();

  constructor(opts: NcclCommunicatorOptions) {
    this.rank = opts.rank;
    this.size = opts.size;
    this.stream = opts.stream;
    this.comm = ncclCommInit(opts.size, opts.id, opts.rank);
  }

  private handle(call: string): Handle {
    if (this.comm === null) throw new NcclError(call, -1, 'communicator destroyed');
    return this.comm;
  }

  allReduceSum(buf: bigint, count: number, dtype: CommDType): void {
    const comm = this.handle('ncclAllReduce');
    checkNccl(this.api.ncclAllReduce(buf, buf, count, NCCL_DTYPE[dtype], ncclSum, comm, this.stream),
      `ncclAllReduce(${count} ${dtype}, rank ${this.rank})`, comm);
  }

  allGather(send: bigint, recv: bigint, count: number, dtype: CommDType): void {
    const comm = this.handle('ncclAllGather');
    checkNccl(this.api.ncclAllGather(send, recv, count, NCCL_DTYPE[dtype], comm, this.stream),
      `ncclAllGather(${count} ${dtype} a rank, rank ${this.rank})`, comm);
  }

  broadcast(buf: bigint, count: number, dtype: CommDType, root: number): void {
    const comm = this.handle('ncclBroadcast');
    checkNccl(this.api.ncclBroadcast(buf, buf, count, NCCL_DTYPE[dtype], root, comm, this.stream),
      `ncclBroadcast(${count} ${dtype} from rank ${root}, rank ${this.rank})`, comm);
  }

  send(buf: bigint, count: number, dtype: CommDType, peer: number): void {
    const comm = this.handle('ncclSend');
    checkNccl(this.api.ncclSend(buf, count, NCCL_DTYPE[dtype], peer, comm, this.stream),
      `ncclSend(${count} ${dtype} to rank ${peer}, rank ${this.rank})`, comm);
  }

  recv(buf: bigint, count: number, dtype: CommDType, peer: number): void {
    const comm = this.handle('ncclRecv');
    checkNccl(this.api.ncclRecv(buf, count, NCCL_DTYPE[dtype], peer, comm, this.stream),
      `ncclRecv(${count} ${dtype} from rank ${peer}, rank ${this.rank})`, comm);
  }

  /** Throws what NCCL reported asynchronously (a peer gone, a network error), if anything. */
  checkAsyncError(): void {
    const comm = this.handle('ncclCommGetAsyncError');
    const status: [number] = [0];
    checkNccl(this.api.ncclCommGetAsyncError(comm, status), 'ncclCommGetAsyncError', comm);
    checkNccl(status[0], `NCCL (asynchronous error, rank ${this.rank})`, comm);
  }

  destroy(): void {
    if (this.comm === null) return;
    const comm = this.comm;
    this.comm = null;
    checkNccl(this.api.ncclCommDestroy(comm), `ncclCommDestroy(rank ${this.rank})`);
  }

  /** Frees the communicator without waiting for the other ranks (an error path: a peer may be gone). */
  abort(): void {
    if (this.comm === null) return;
    const comm = this.comm;
    this.comm = null;
    checkNccl(this.api.ncclCommAbort(comm), `ncclCommAbort(rank ${this.rank})`);
  }
}

/** Runs fn's NCCL calls as one group (ncclGroupStart / ncclGroupEnd): fused, and progressing together. */
export function ncclGroup(fn: () => void): void {
  const api = ncclApi();
  checkNccl(api.ncclGroupStart(), 'ncclGroupStart');
  try {
    fn();
  } finally {
    checkNccl(api.ncclGroupEnd(), 'ncclGroupEnd');
  }
}
