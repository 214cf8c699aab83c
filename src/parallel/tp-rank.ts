// A rank's TensorParallelRank on its backend: the all-reduce the layers call (LayerContext.tp), over NCCL on the CUDA
// backend's stream (bf16 activations, in place, captured into decode graphs with the kernels around it) or over the
// shared-memory communicator between threads on the CPU backend (f32: the reference the sharding is tested with).
// On CUDA, all-reduces up to PEER_ALL_REDUCE_MAX_BYTES take the one-shot kernel over peer memory instead
// (backend/cuda/peer-allreduce.ts; vLLM's custom all-reduce, and its --disable-custom-all-reduce), where the devices
// reach each other's memory.

import type { Backend, TensorParallelRank } from '../backend/backend.js';
import { asCpu } from '../backend/cpu/tensor.js';
import type { Device } from '../backend/cuda/device.js';
import { check } from '../backend/cuda/ffi/driver.js';
import type { PeerAllReduce } from '../backend/cuda/peer-allreduce.js';
import type { Communicator } from './comm.js';
import type { CpuCommGroup } from './cpu-comm.js';

/** How ranks meet: a shared-memory group (threads, CPU backend) or an NCCL unique id from rank 0 (CUDA). */
export type CommInit = { kind: 'cpu'; group: CpuCommGroup } | { kind: 'nccl'; id: Uint8Array };

export interface RankComm {
  tp: TensorParallelRank;
  /** Frees the communicator (every rank, as a collective). */
  destroy(): void;
  /** Frees it without waiting for the others (a rank failed); `reason` reaches the ranks waiting on this one (CPU). */
  abort(reason?: string): void;
}

/**
 * The largest all-reduce the one-shot peer kernel takes (bytes; NCCL above): where it was faster than NCCL on
 * 2 H200s (docs/perf-log.md, session 31), and its staging buffers' size (two a rank).
 */
export const PEER_ALL_REDUCE_MAX_BYTES = 4 << 20;

/**
 * This rank's communicator and all-reduce. On NCCL it blocks until every rank has called it with the same id, so
 * each rank calls it from its own thread once its backend is up. `peer`: whether small all-reduces may take the
 * one-shot kernel (every rank passes the same).
 */
export async function joinRanks(init: CommInit, rank: number, size: number, backend: Backend,
  opts: { peer: boolean } = { peer: true }): Promise<RankComm> {
  if (init.kind === 'cpu') {
    if (backend.name !== 'cpu') throw new Error('a shared-memory communicator is for the CPU backend');
    const { CpuCommunicator } = await import('./cpu-comm.js');
    const comm = new CpuCommunicator(init.group, rank);
    return {
      tp: { rank, size, allReduce: (x) => comm.allReduceSum(asCpu(x).data, x.shape.reduce((a, b) => a * b, 1), 'f32'),
        allGather: (send, recv) => comm.allGather(asCpu(send).data, asCpu(recv).data, send.shape.reduce((a, b) => a * b, 1), 'f32') },
      destroy: () => comm.destroy(), abort: (reason) => comm.abort(reason),
    };
  }
  const { CudaBackend } = await import('../backend/cuda/cuda-backend.js');
  const { asCuda } = await import('../backend/cuda/tensor.js');
  if (!(backend instanceof CudaBackend)) throw new Error('an NCCL communicator is for the CUDA backend');
  const { createNcclCommunicator } = await import('./comm.js');
  const device = backend.device;
  const comm = await createNcclCommunicator({ rank, size, id: init.id, stream: device.stream });
  let peer: PeerAllReduce | null = null;
  if (opts.peer) {
    const { PeerAllReduce: Peer } = await import('../backend/cuda/peer-allreduce.js');
    peer = Peer.create(device, rank, size, PEER_ALL_REDUCE_MAX_BYTES, (mine) => gatherBytes(comm, device, mine)).allReduce;
  }
  // A graph that captured an NCCL collective holds a reference on the communicator, and ncclCommDestroy and
  // ncclCommAbort wait until every such graph is destroyed: the graphs go first (session 31: a -tp 2 engine with
  // graphs never closed). A graph still running is freed by CUDA when it ends (an abort ends its collectives).
  const release = (): void => backend.graphs.dispose();
  return {
    tp: {
      rank, size,
      allReduce: (x) => {
        const t = asCuda(x);
        if (!peer?.allReduceSum(t.ptr, t.numElements, 'bf16')) comm.allReduceSum(t.ptr, t.numElements, 'bf16');
      },
      allGather: (send, recv) => comm.allGather(asCuda(send).ptr, asCuda(recv).ptr, asCuda(send).numElements, 'bf16'),
    },
    destroy: () => {
      release();
      peer?.dispose();
      comm.destroy();
    },
    // the peer regions stay: a peer's kernel may still spin on them until its timeout (the process is ending)
    abort: () => {
      release();
      comm.abort();
    },
  };
}

/** Every rank's `mine` (the same length on each), in rank order: an all-gather through device memory. */
export function gatherBytes(comm: Communicator<bigint>, device: Device, mine: Uint8Array): Uint8Array[] {
  const words = Math.ceil(mine.length / 4);
  const send = device.alloc(words * 4);
  const recv = device.alloc(words * 4 * comm.size);
  const padded = new Uint8Array(words * 4);
  padded.set(mine);
  device.upload(send, padded);
  comm.allGather(send, recv, words, 'i32');
  const all = new Uint8Array(words * 4 * comm.size);
  device.synchronize();
  check(device.api.cuMemcpyDtoH_v2(all, recv, all.length), 'cuMemcpyDtoH_v2');
  device.free(send);
  device.free(recv);
  return Array.from({ length: comm.size }, (_, r) => all.subarray(r * words * 4, r * words * 4 + mine.length));
}
