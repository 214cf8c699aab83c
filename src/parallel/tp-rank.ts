// A rank's TensorParallelRank on its backend: the all-reduce the layers call (LayerContext.tp), over NCCL on the CUDA
// backend's stream (bf16 activations, in place, captured into decode graphs with the kernels around it) or over the
// shared-memory communicator between threads on the CPU backend (f32: the reference the sharding is tested with).

import type { Backend, TensorParallelRank } from '../backend/backend.js';
import { asCpu } from '../backend/cpu/tensor.js';
import type { CpuCommGroup } from './cpu-comm.js';

/** How ranks meet: a shared-memory group (threads, CPU backend) or an NCCL unique id from rank 0 (CUDA). */
export type CommInit = { kind: 'cpu'; group: CpuCommGroup } | { kind: 'nccl'; id: Uint8Array };

export interface RankComm {
  tp: TensorParallelRank;
  /** Frees the communicator (every rank, as a collective). */
  destroy(): void;
  /** Frees it without waiting for the others (a rank failed). */
  abort(): void;
}

/**
 * This rank's communicator and all-reduce. On NCCL it blocks until every rank has called it with the same id, so
 * each rank calls it from its own thread once its backend is up.
 */
export async function joinRanks(init: CommInit, rank: number, size: number, backend: Backend): Promise<RankComm> {
  if (init.kind === 'cpu') {
    if (backend.name !== 'cpu') throw new Error('a shared-memory communicator is for the CPU backend');
    const { CpuCommunicator } = await import('./cpu-comm.js');
    const comm = new CpuCommunicator(init.group, rank);
    return {
      tp: { rank, size, allReduce: (x) => comm.allReduceSum(asCpu(x).data, x.shape.reduce((a, b) => a * b, 1), 'f32') },
      destroy: () => comm.destroy(), abort: () => comm.abort(),
    };
  }
  const { CudaBackend } = await import('../backend/cuda/cuda-backend.js');
  const { asCuda } = await import('../backend/cuda/tensor.js');
  if (!(backend instanceof CudaBackend)) throw new Error('an NCCL communicator is for the CUDA backend');
  const { createNcclCommunicator } = await import('./comm.js');
  const comm = await createNcclCommunicator({ rank, size, id: init.id, stream: backend.device.stream });
  return {
    tp: { rank, size, allReduce: (x) => { const t = asCuda(x); comm.allReduceSum(t.ptr, t.numElements, 'bf16'); } },
    destroy: () => comm.destroy(), abort: () => comm.abort(),
  };
}
