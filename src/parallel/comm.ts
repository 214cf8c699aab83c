// The collectives tensor parallelism needs, behind one small interface: all-reduce (sum, in place), all-gather and
// broadcast over `size` ranks, and the point-to-point send and receive that pipeline stages pass the residual stream
// with. Two implementations: NCCL on device buffers (nccl-comm.ts, on the backend's stream;
// loaded only through createNcclCommunicator, so a single-GPU server never opens libnccl) and threads exchanging
// through shared memory on host arrays (cpu-comm.ts: the sharding arithmetic tested end to end without a GPU).
//
// Every rank calls the same collectives in the same order with the same counts; a call returns once this rank's part
// is enqueued (NCCL: on its stream) or done (CPU). A send and its recv are the two ranks' alone: between two ranks,
// the k-th recv of one from the other takes the k-th send, of the same count and dtype.

import type { NcclCommunicator, NcclCommunicatorOptions } from './nccl-comm.js';

/** Element types a collective moves: bf16 and f16 as their 16-bit patterns. */
export type CommDType = 'f32' | 'bf16' | 'f16' | 'i32';

export const COMM_DTYPE_BYTES: Record<CommDType, number> = { f32: 4, bf16: 2, f16: 2, i32: 4 };

/** `Buf`: a device pointer (bigint) for NCCL, a typed array for the CPU implementation. */
export interface Communicator<Buf> {
  readonly rank: number;
  readonly size: number;
  /** buf[0..count) = the sum over ranks of every rank's buf[0..count), on every rank. */
  allReduceSum(buf: Buf, count: number, dtype: CommDType): void;
  /** recv[r count .. (r + 1) count) = rank r's send[0..count), on every rank (recv holds size x count). */
  allGather(send: Buf, recv: Buf, count: number, dtype: CommDType): void;
  /** buf[0..count) = root's buf[0..count), on every rank. */
  broadcast(buf: Buf, count: number, dtype: CommDType, root: number): void;
  /** buf[0..count) to rank `peer` (which takes it with recv); it may return before the peer has it. */
  send(buf: Buf, count: number, dtype: CommDType, peer: number): void;
  /** buf[0..count) = what rank `peer` sent (send), its sends taken in the order it made them. */
  recv(buf: Buf, count: number, dtype: CommDType, peer: number): void;
  /** Frees the communicator; on NCCL every rank calls it (a collective), each from its own thread. */
  destroy(): void;
}

/**
 * An NCCL communicator for this rank on `opts.stream` (the backend's stream; the rank's CUDA context current on the
 * calling thread). Blocks until every rank has called it with the same id: each rank from its own thread or process.
 */
export async function createNcclCommunicator(opts: NcclCommunicatorOptions): Promise<NcclCommunicator> {
  const { NcclCommunicator: Impl } = await import('./nccl-comm.js');
  return new Impl(opts);
}

/** A fresh NCCL unique id (128 bytes) for rank 0 to hand the others; loads libnccl. */
export async function createNcclUniqueId(): Promise<Uint8Array> {
  const { ncclUniqueId } = await import('../backend/cuda/ffi/nccl.js');
  return ncclUniqueId();
}
