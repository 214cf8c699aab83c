// All-reduce latency over the local GPUs through Quire's NCCL binding, one worker thread a rank (as NCCL needs each
// rank's calls to progress concurrently), timed with CUDA events on each rank's stream; the table shows the slowest
// rank per size, with algorithm and bus bandwidth as nccl-tests defines them (busbw = algbw x 2 (n - 1) / n), and
// the one-shot peer kernel's time beside NCCL's for the sizes it takes (tp-rank.ts PEER_ALL_REDUCE_MAX_BYTES comes
// from this table). --graph: each size's iterations captured in a CUDA graph and replayed (as decode steps run them).
//
//   node dist/src/parallel/bench-allreduce.js [--gpus 2] [--dtype bf16|f32] [--min 4096] [--max 67108864]
//     [--iters 50] [--warmup 10] [--graph]
//
// NVLink multicast (NVLS) stays off (NCCL_NVLS_ENABLE=0 unless set): Quire does not use it, and on shared hosts a
// program that does can leave the GPUs unusable for others.

import { parseArgs } from 'node:util';
import { isMainThread, parentPort, Worker, workerData } from 'node:worker_threads';
import { pathToFileURL } from 'node:url';
import { Device } from '../backend/cuda/device.js';
import { check, CU_EVENT_DEFAULT, outPtr, type Handle } from '../backend/cuda/ffi/driver.js';
import { GraphCache } from '../backend/cuda/graph-cache.js';
import { formatNcclVersion, ncclUniqueId, ncclVersion } from '../backend/cuda/ffi/nccl.js';
import { cudaAvailable } from '../backend/cuda/probe.js';
import { COMM_DTYPE_BYTES, type CommDType } from './comm.js';
import { NcclCommunicator } from './nccl-comm.js';
import { PeerAllReduce } from '../backend/cuda/peer-allreduce.js';
import { gatherBytes, PEER_ALL_REDUCE_MAX_BYTES } from './tp-rank.js';

interface RankJob {
  rank: number;
  size: number;
  id: Uint8Array;
  dtype: CommDType;
  sizesBytes: number[];
  iters: number;
  warmup: number;
  graph: boolean;
}

interface RankTimes {
  rank: number;
  device: string;
  /** Microseconds per all-reduce, by size: NCCL's, and the peer kernel's (null: a size it does not take). */
  us: number[];
  peerUs: (number | null)[];
  peerReason: string;
}

/** A rank: its device, its communicator and peer kernel, then each size timed over `iters` back-to-back all-reduces. */
function runRank(job: RankJob): RankTimes {
  const device = new Device(job.rank);
  const api = device.api;
  const comm = new NcclCommunicator({ rank: job.rank, size: job.size, id: job.id, stream: device.stream });
  const { allReduce: peer, reason } = PeerAllReduce.create(device, job.rank, job.size, PEER_ALL_REDUCE_MAX_BYTES,
    (mine) => gatherBytes(comm, device, mine));
  const maxBytes = Math.max(...job.sizesBytes);
  const buf = device.alloc(maxBytes);
  // small values (0x3c3c: bf16 0.0115): sums stay finite, and the timing does not depend on them
  device.fillBytesAsync(buf, 0x3c, maxBytes);
  const event = (): Handle => {
    const out: [Handle | null] = [null];
    check(api.cuEventCreate(out, CU_EVENT_DEFAULT), 'cuEventCreate');
    return outPtr(out, 'cuEventCreate');
  };
  const [start, end] = [event(), event()];
  const graphs = new GraphCache(api, device.stream, null);
  /** Microseconds per call of `one`, `iters` back to back (in one graph with --graph), after `warmup` eager calls. */
  const time = (one: () => void): number => {
    for (let i = 0; i < job.warmup; i++) one();
    device.synchronize();
    let exec: Handle | null = null;
    if (job.graph) {
      graphs.capture(0, '', () => {
        for (let i = 0; i < job.iters; i++) one();
        return null;
      });
      exec = graphs.get(0)!.exec;
      check(api.cuGraphLaunch(exec, device.stream), 'cuGraphLaunch');  // its first launch uploads it
      device.synchronize();
    }
    check(api.cuEventRecord(start, device.stream), 'cuEventRecord');
    if (exec !== null) check(api.cuGraphLaunch(exec, device.stream), 'cuGraphLaunch');
    else for (let i = 0; i < job.iters; i++) one();
    check(api.cuEventRecord(end, device.stream), 'cuEventRecord');
    check(api.cuEventSynchronize(end), 'cuEventSynchronize');
    const ms: [number] = [0];
    check(api.cuEventElapsedTime_v2(ms, start, end), 'cuEventElapsedTime');
    graphs.destroy(0);
    return (ms[0] * 1000) / job.iters;
  };
  const us: number[] = [];
  const peerUs: (number | null)[] = [];
  const peerDType = job.dtype === 'bf16' || job.dtype === 'f32' ? job.dtype : null;
  for (const bytes of job.sizesBytes) {
    const count = bytes / COMM_DTYPE_BYTES[job.dtype];
    us.push(time(() => comm.allReduceSum(buf, count, job.dtype)));
    peerUs.push(peer && peerDType && peer.takes(count, peerDType) ? time(() => peer.allReduceSum(buf, count, peerDType)) : null);
  }
  comm.checkAsyncError();
  device.synchronize();
  peer?.dispose();
  comm.destroy();
  api.cuEventDestroy_v2(start);
  api.cuEventDestroy_v2(end);
  device.free(buf);
  const name = device.name;
  device.dispose();
  return { rank: job.rank, device: name, us, peerUs, peerReason: reason };
}

/** The slowest rank's time, or a dash where the peer kernel did not take the size. */
function peerCell(us: (number | null)[]): string {
  return us.some((u) => u === null) ? '-' : Math.max(...(us as number[])).toFixed(1);
}

function formatBytes(b: number): string {
  return b >= 1 << 20 ? `${b / (1 << 20)} MiB` : `${b / 1024} KiB`;
}

async function main(): Promise<void> {
  const { values } = parseArgs({ options: {
    gpus: { type: 'string', default: '2' }, dtype: { type: 'string', default: 'bf16' },
    min: { type: 'string', default: String(4 << 10) }, max: { type: 'string', default: String(64 << 20) },
    iters: { type: 'string', default: '50' }, warmup: { type: 'string', default: '10' },
    graph: { type: 'boolean', default: false },
  } });
  const size = Number(values.gpus);
  const dtype = values.dtype as CommDType;
  if (!['bf16', 'f32'].includes(dtype)) throw new Error(`--dtype ${dtype}: expected bf16 or f32`);
  const probe = cudaAvailable();
  if (!probe.ok) throw new Error(`no CUDA device: ${probe.reason}`);
  if (!Number.isInteger(size) || size < 1 || size > probe.numDevices) {
    throw new Error(`--gpus ${values.gpus}: this host has ${probe.numDevices} CUDA device(s)`);
  }
  const sizesBytes: number[] = [];
  for (let b = Number(values.min); b <= Number(values.max); b *= 4) sizesBytes.push(b);
  // NCCL reads its environment once, at its first call, from the process's: set before that, on this thread
  process.env.NCCL_NVLS_ENABLE ??= '0';
  const id = ncclUniqueId();
  const jobs: RankJob[] = Array.from({ length: size }, (_, rank) => ({ rank, size, id, dtype, sizesBytes,
    iters: Number(values.iters), warmup: Number(values.warmup), graph: values.graph }));
  const times = await Promise.all(jobs.map((job) => new Promise<RankTimes>((resolve, reject) => {
    const worker = new Worker(new URL(import.meta.url), { workerData: job });
    worker.once('message', resolve);
    worker.once('error', reject);
    worker.once('exit', (code) => { if (code !== 0) reject(new Error(`rank ${job.rank} exited with code ${code}`)); });
  })));
  console.log(`all-reduce (sum, in place), ${size} x ${times[0]!.device}, NCCL ${formatNcclVersion(ncclVersion())}, ` +
    `${dtype}, ${values.iters} iterations a size after ${values.warmup}${values.graph ? ', in CUDA graphs' : ''}, ` +
    `NCCL_NVLS_ENABLE=${process.env.NCCL_NVLS_ENABLE}` + (times[0]!.peerReason ? `; no peer kernel: ${times[0]!.peerReason}` : ''));
  console.log('| size | elements | NCCL (us, slowest rank) | algbw (GB/s) | busbw (GB/s) | one-shot peer (us) |');
  console.log('|---:|---:|---:|---:|---:|---:|');
  sizesBytes.forEach((bytes, i) => {
    const us = Math.max(...times.map((t) => t.us[i]!));
    const algbw = bytes / (us * 1e3);
    const busbw = algbw * (2 * (size - 1)) / size;
    console.log(`| ${formatBytes(bytes)} | ${bytes / COMM_DTYPE_BYTES[dtype]} | ${us.toFixed(1)} | ${algbw.toFixed(1)} | ` +
      `${busbw.toFixed(1)} | ${peerCell(times.map((t) => t.peerUs[i] ?? null))} |`);
  });
}

if (!isMainThread && (workerData as RankJob | null)?.id !== undefined) {
  parentPort!.postMessage(runRank(workerData as RankJob));
} else if (isMainThread && import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  main().catch((e: unknown) => {
    console.error((e as Error).message);
    process.exit(1);
  });
}
