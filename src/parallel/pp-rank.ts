// A pipeline stage's link to its neighbours (Backend's PipelineStageLink): the point-to-point send and receive of its
// pipeline group, the ranks of one tensor-parallel rank across the stages (group rank = stage), over NCCL on the CUDA
// backend's stream (bf16 activations; a step's tensors as one NCCL group, so the two go together and a graph
// captures them as one node) or through the shared-memory mailboxes between threads on the CPU backend (f32).

import type { Backend, PipelineStageLink, Tensor } from '../backend/backend.js';
import { asCpu } from '../backend/cpu/tensor.js';
import type { CommInit } from './tp-rank.js';

export interface StageComm {
  link: PipelineStageLink;
  /** Frees the communicator (every stage, as a collective). */
  destroy(): void;
  /** Frees it without waiting for the others (a rank failed); `reason` reaches the stages waiting on this one (CPU). */
  abort(reason?: string): void;
}

const numElements = (t: Tensor): number => t.shape.reduce((a, b) => a * b, 1);

/**
 * Joins stage `stage` of `numStages` to its pipeline group (`init`: the group's, made with p2p on the CPU). On NCCL
 * it blocks until every stage of the group has called it, so each calls it from its own thread or process.
 */
export async function joinStage(init: CommInit, stage: number, numStages: number, backend: Backend): Promise<StageComm> {
  if (!Number.isInteger(stage) || stage < 0 || stage >= numStages) throw new Error(`pipeline stage ${stage} is not in [0, ${numStages})`);
  const next = stage + 1;
  const prev = stage - 1;
  const check = (call: string, peer: number): void => {
    if (peer < 0 || peer >= numStages) throw new Error(`${call}: pipeline stage ${stage} of ${numStages} has no ${call === 'send' ? 'next' : 'previous'} stage`);
  };
  if (init.kind === 'cpu') {
    if (backend.name !== 'cpu') throw new Error('a shared-memory communicator is for the CPU backend');
    const { CpuCommunicator } = await import('./cpu-comm.js');
    const comm = new CpuCommunicator(init.group, stage);
    return {
      link: {
        stage, numStages,
        send: (ts) => { check('send', next); for (const t of ts) comm.send(asCpu(t).data, numElements(t), 'f32', next); },
        recv: (ts) => { check('recv', prev); for (const t of ts) comm.recv(asCpu(t).data, numElements(t), 'f32', prev); },
      },
      destroy: () => comm.destroy(), abort: (reason) => comm.abort(reason),
    };
  }
  const { CudaBackend } = await import('../backend/cuda/cuda-backend.js');
  const { asCuda } = await import('../backend/cuda/tensor.js');
  if (!(backend instanceof CudaBackend)) throw new Error('an NCCL communicator is for the CUDA backend');
  const { createNcclCommunicator } = await import('./comm.js');
  const { ncclGroup } = await import('./nccl-comm.js');
  const comm = await createNcclCommunicator({ rank: stage, size: numStages, id: init.id, stream: backend.device.stream });
  const bf16 = (t: Tensor): bigint => {
    const c = asCuda(t);
    if (c.dtype !== 'bf16') throw new Error(`pipeline stage ${stage}: a ${c.dtype} activation; the stages pass bf16`);
    return c.ptr;
  };
  // a graph that captured a send or a receive holds a reference on the communicator: the graphs go first (tp-rank.ts)
  const release = (): void => backend.graphs.dispose();
  return {
    link: {
      stage, numStages,
      send: (ts) => {
        check('send', next);
        ncclGroup(() => { for (const t of ts) comm.send(bf16(t), numElements(t), 'bf16', next); });
      },
      recv: (ts) => {
        check('recv', prev);
        ncclGroup(() => { for (const t of ts) comm.recv(bf16(t), numElements(t), 'bf16', prev); });
      },
    },
    destroy: () => {
      release();
      comm.destroy();
    },
    abort: () => {
      release();
      comm.abort();
    },
  };
}
