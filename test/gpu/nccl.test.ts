// NCCL through Quire's binding on 2 GPUs (skipped on fewer): each rank a worker thread on its own device, bf16 and
// f32 all-reduces of 1 KiB and 64 MiB summed right on both ranks, then an all-gather and a broadcast; and the one-shot
// peer kernel's all-reduces (three back to back each, so the barrier and the two staging buffers are exercised) of
// 1 KiB and of its largest size, on the pointers of a rank in another thread.
//   npm run build && node scripts/run-tests.mjs --gpu nccl

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Worker } from 'node:worker_threads';
import { cudaAvailable } from '../../src/backend/cuda/probe.js';
import { formatNcclVersion, ncclVersion } from '../../src/backend/cuda/ffi/nccl.js';
import { createNcclUniqueId } from '../../src/parallel/comm.js';
import { PEER_ALL_REDUCE_MAX_BYTES } from '../../src/parallel/tp-rank.js';
import type { NcclRankJob, NcclRankResult } from './nccl-rank-worker.js';

// NVLink multicast off before NCCL first reads its environment (at the unique id below): on shared hosts a program
// that uses it can leave the GPUs unusable for others. Set here, on the main thread, the process environment's.
process.env.NCCL_NVLS_ENABLE = '0';

const probe = cudaAvailable();
const skip = !probe.ok ? `no CUDA device: ${probe.reason}`
  : probe.numDevices < 2 ? `needs 2 CUDA devices, found ${probe.numDevices}` : false;

const SIZE = 2;
const KiB = 1024;
const MiB = 1024 * 1024;

test('2 ranks, one a GPU: all-reduce sums bf16 and f32 of 1 KiB and 64 MiB (NCCL) and up to the peer kernel\'s largest; all-gather and broadcast', { skip, timeout: 300_000 },
  async (t) => {
    const id = await createNcclUniqueId();
    t.diagnostic(`NCCL ${formatNcclVersion(ncclVersion())}`);
    const cases = [{ dtype: 'f32', bytes: KiB, via: 'nccl' }, { dtype: 'bf16', bytes: KiB, via: 'nccl' },
      { dtype: 'f32', bytes: 64 * MiB, via: 'nccl' }, { dtype: 'bf16', bytes: 64 * MiB, via: 'nccl' },
      { dtype: 'f32', bytes: KiB, via: 'peer' }, { dtype: 'bf16', bytes: KiB, via: 'peer' },
      { dtype: 'bf16', bytes: 48, via: 'peer' }, { dtype: 'bf16', bytes: PEER_ALL_REDUCE_MAX_BYTES, via: 'peer' }] as const;
    const workers: Worker[] = [];
    const results = await Promise.all(Array.from({ length: SIZE }, (_, rank) => new Promise<NcclRankResult>((resolve, reject) => {
      const job: NcclRankJob = { rank, size: SIZE, id, cases: [...cases] };
      const worker = new Worker(new URL('./nccl-rank-worker.js', import.meta.url), { workerData: job });
      // a rank stuck in NCCL (its peer died before joining) must not hold the process open after the test fails
      worker.unref();
      workers.push(worker);
      worker.once('message', resolve);
      worker.once('error', reject);
      worker.once('exit', (code) => reject(new Error(`rank ${rank} exited (code ${code}) before reporting`)));
    }))).finally(() => { for (const w of workers) void w.terminate(); });
    for (const r of results) {
      assert.equal(r.error, undefined, `rank ${r.rank}: ${r.error}`);
      t.diagnostic(`rank ${r.rank} on ${r.device}`);
      // 2 devices of one host reach each other's memory (NVLink or PCIe): the peer kernel starts
      assert.equal(r.peerReason, '', `rank ${r.rank}: no peer kernel`);
      assert.equal(r.cases.length, cases.length);
      for (const c of r.cases) {
        assert.equal(c.wrong, 0, `rank ${r.rank}, ${c.via} ${c.dtype} ${c.bytes} bytes: ${c.wrong} of ${c.count} wrong, first ${c.first}`);
      }
      assert.deepEqual(r.gathered, [0, 0.5, -0, 1, 1.5, -1], `rank ${r.rank} all-gather`);
      assert.deepEqual(r.broadcast, [1, 2, 3], `rank ${r.rank} broadcast`);
    }
  });
