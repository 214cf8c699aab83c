// One rank of cpu-comm.test.ts: runs the scenario named in workerData and posts what it saw.

import { parentPort, workerData } from 'node:worker_threads';
import { CpuCommunicator, type CpuCommGroup } from '../../src/parallel/cpu-comm.js';
import { f32ToBf16Bits, f32ToF16Bits } from '../../src/loader/dtype.js';
import { contribution, stageMessage } from './tp-math.js';

export interface CommWorkerData {
  group: CpuCommGroup;
  rank: number;
  scenario: 'collectives' | 'abort' | 'timeout' | 'pipeline' | 'p2p-abort';
}


const { group, rank, scenario } = workerData as CommWorkerData;
const comm = new CpuCommunicator(group, rank);

function run(): unknown {
  if (scenario === 'abort') {
    if (rank === 1) {
      comm.abort();
      return 'aborted';
    }
    try {
      comm.allReduceSum(new Float32Array(4), 4, 'f32');
      return 'returned';
    } catch (e) {
      return (e as Error).message;
    }
  }
  if (scenario === 'timeout') {
    if (rank === 1) return 'idle';
    try {
      comm.broadcast(new Int32Array(4), 4, 'i32', 0);
      return 'returned';
    } catch (e) {
      return (e as Error).message;
    }
  }
  if (scenario === 'pipeline') {
    // every rank receives three messages of the rank before it (sizes 5, 70, 3: one chunk, several, one) and sends
    // three to the rank after it, the way stages pass the residual stream; each sends before it waits on the next
    const sizes = [5, 70, 3];
    const got: number[][] = [];
    for (const [k, n] of sizes.entries()) {
      if (rank + 1 < comm.size) comm.send(stageMessage(rank, k, n), n, 'f32', rank + 1);
      if (rank > 0) {
        const buf = new Float32Array(n);
        comm.recv(buf, n, 'f32', rank - 1);
        got.push([...buf]);
      }
    }
    comm.destroy();
    return got;
  }
  if (scenario === 'p2p-abort') {
    // rank 0 fails with its reason; rank 1, waiting to receive from it, ends naming it
    if (rank === 0) {
      comm.abort('pipeline stage 0 (rank 1): out of memory');
      return 'aborted';
    }
    try {
      comm.recv(new Float32Array(4), 4, 'f32', 0);
      return 'returned';
    } catch (e) {
      return (e as Error).message;
    }
  }
  const n = 100;
  const f32 = Float32Array.from({ length: n }, (_, i) => rank * 1000 + i * 0.5);
  comm.allReduceSum(f32, n, 'f32');
  const bf16 = Uint16Array.from({ length: n }, (_, i) => f32ToBf16Bits(contribution(rank, i)));
  comm.allReduceSum(bf16, n, 'bf16');
  const f16 = Uint16Array.from({ length: n }, (_, i) => f32ToF16Bits(contribution(rank, i) / 4));
  comm.allReduceSum(f16, n, 'f16');
  const i32 = Int32Array.from({ length: n }, (_, i) => rank * 100_000 + i);
  comm.allReduceSum(i32, n, 'i32');
  const count = 37;
  const send = Float32Array.from({ length: count }, (_, i) => rank + i / 100);
  const gathered = new Float32Array(comm.size * count);
  comm.allGather(send, gathered, count, 'f32');
  const root = comm.size - 1;
  const bcast = Int32Array.from({ length: 50 }, (_, i) => (rank === root ? 7 * i + 1 : -1));
  comm.broadcast(bcast, 50, 'i32', root);
  comm.destroy();
  return { f32, bf16, f16, i32, gathered, bcast };
}

parentPort!.postMessage(run());
