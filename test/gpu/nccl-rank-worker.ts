// One rank of nccl.test.ts, in its own thread (NCCL needs every rank's calls to progress at once): its device, its
// communicator on the device's stream, then each case's all-reduce checked here element by element (a 64 MiB
// buffer is not posted back); all-gather and broadcast once, small.

import { parentPort, workerData } from 'node:worker_threads';
import { Device } from '../../src/backend/cuda/device.js';
import { check } from '../../src/backend/cuda/ffi/driver.js';
import { bf16BitsToF32, f32ToBf16Bits } from '../../src/loader/dtype.js';
import { PeerAllReduce } from '../../src/backend/cuda/peer-allreduce.js';
import { createNcclCommunicator } from '../../src/parallel/comm.js';
import { gatherBytes, PEER_ALL_REDUCE_MAX_BYTES } from '../../src/parallel/tp-rank.js';
import { contribution } from '../parallel/tp-math.js';

export interface NcclCase {
  dtype: 'f32' | 'bf16';
  bytes: number;
  /** NCCL's all-reduce, or the one-shot peer kernel's (three back to back, on different data, each checked). */
  via: 'nccl' | 'peer';
}

export interface NcclRankJob {
  rank: number;
  size: number;
  id: Uint8Array;
  cases: NcclCase[];
}

export interface NcclRankResult {
  rank: number;
  device: string;
  /** Per case: elements that differ from the sum, and the first one's index and values. */
  cases: { dtype: string; bytes: number; via: string; count: number; wrong: number; first: string }[];
  /** Why the peer kernel did not start, where it did not. */
  peerReason: string;
  gathered: number[];
  broadcast: number[];
  error?: string;
}

/** Rank r's value at element i: exact in bf16 and in f32, and so are the sums. */
const value = (dtype: NcclCase['dtype'], rank: number, i: number): number =>
  dtype === 'bf16' ? contribution(rank, i) : contribution(rank, i) * 0.25 + rank * 1024 + (i % 4096);

async function run(job: NcclRankJob): Promise<NcclRankResult> {
  const device = new Device(job.rank);
  const comm = await createNcclCommunicator({ rank: job.rank, size: job.size, id: job.id, stream: device.stream });
  const download = (ptr: bigint, host: ArrayBufferView): void => {
    device.synchronize();
    check(device.api.cuMemcpyDtoH_v2(host, ptr, host.byteLength), 'cuMemcpyDtoH_v2');
  };
  const { allReduce: peer, reason } = PeerAllReduce.create(device, job.rank, job.size, PEER_ALL_REDUCE_MAX_BYTES,
    (mine) => gatherBytes(comm, device, mine));
  const result: NcclRankResult = { rank: job.rank, device: device.name, cases: [], gathered: [], broadcast: [],
    peerReason: reason };
  for (const c of job.cases) {
    if (c.via === 'peer' && !peer) continue;
    const count = c.bytes / (c.dtype === 'bf16' ? 2 : 4);
    const reps = c.via === 'peer' ? 3 : 1;
    // rep k's element i holds element i + 7k's values: each call's sums differ from the one before
    const hosts = Array.from({ length: reps }, (_, k) => {
      const host = c.dtype === 'bf16' ? new Uint16Array(count) : new Float32Array(count);
      for (let i = 0; i < count; i++) {
        host[i] = c.dtype === 'bf16' ? f32ToBf16Bits(value('bf16', job.rank, i + 7 * k)) : value('f32', job.rank, i + 7 * k);
      }
      return host;
    });
    const bufs = hosts.map((host) => {
      const buf = device.alloc(c.bytes);
      device.upload(buf, host);
      return buf;
    });
    for (const buf of bufs) {
      if (c.via === 'peer') peer!.allReduceSum(buf, count, c.dtype);
      else comm.allReduceSum(buf, count, c.dtype);
    }
    let wrong = 0;
    let first = '';
    hosts.forEach((host, k) => {
      host.fill(0);
      download(bufs[k]!, host);
      for (let i = 0; i < count; i++) {
        let want = 0;
        for (let r = 0; r < job.size; r++) want += value(c.dtype, r, i + 7 * k);
        const got = c.dtype === 'bf16' ? bf16BitsToF32(host[i]!) : host[i]!;
        if (got !== want && wrong++ === 0) first = `call ${k}: [${i}] = ${got}, expected ${want}`;
      }
    });
    result.cases.push({ dtype: c.dtype, bytes: c.bytes, via: c.via, count, wrong, first });
    for (const buf of bufs) device.free(buf);
  }
  peer?.dispose();
  // all-gather: 3 f32 a rank; broadcast: rank size - 1's 5 f32
  const send = device.alloc(12);
  const recv = device.alloc(12 * job.size);
  device.upload(send, Float32Array.from([job.rank, job.rank + 0.5, -job.rank]));
  comm.allGather(send, recv, 3, 'f32');
  const gathered = new Float32Array(3 * job.size);
  download(recv, gathered);
  result.gathered = [...gathered];
  const root = job.size - 1;
  device.upload(send, Float32Array.from(job.rank === root ? [1, 2, 3] : [0, 0, 0]));
  comm.broadcast(send, 3, 'f32', root);
  const got = new Float32Array(3);
  download(send, got);
  result.broadcast = [...got];
  (comm as { checkAsyncError?: () => void }).checkAsyncError?.();
  device.free(send);
  device.free(recv);
  comm.destroy();
  device.dispose();
  return result;
}

const job = workerData as NcclRankJob;
run(job).then((r) => parentPort!.postMessage(r), (e: unknown) => parentPort!.postMessage({ rank: job.rank, device: '',
  cases: [], gathered: [], broadcast: [], peerReason: '', error: (e as Error).stack ?? String(e) } satisfies NcclRankResult));
