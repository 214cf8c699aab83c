// One rank of cpu-comm.test.ts: runs the scenario named in workerData and posts what it saw.

import { parentPort, workerData } from 'node:worker_threads';
import { CpuCommunicator, type CpuCommGroup } from '../../src/parallel/cpu-comm.js';
import { f32ToBf16Bits, f32ToF16Bits } from '../../src/loader/dtype.js';
import { contribution } from './tp-math.js';

export interface CommWorkerData {
  group: CpuCommGroup;
  rank: number;
  scenario: 'collectives' | 'abort' | 'timeout';
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
