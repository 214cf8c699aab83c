// Runs one worker thread per rank and collects what each posts back (the CPU communicator's tests).

import { Worker } from 'node:worker_threads';

/** Starts `size` workers of `script` (workerData: data(rank)); resolves with each rank's one message, in rank order. */
export async function runRanks<T>(script: URL, size: number, data: (rank: number) => unknown): Promise<T[]> {
  const results = await Promise.allSettled(Array.from({ length: size }, (_, rank) => new Promise<T>((resolve, reject) => {
    const worker = new Worker(script, { workerData: data(rank) });
    let result: { value: T } | null = null;
    worker.on('message', (m: T) => { result = { value: m }; });
    worker.on('error', reject);
    worker.on('exit', (code) => {
      if (result) resolve(result.value);
      else reject(new Error(`rank ${rank} exited with code ${code} and no result`));
    });
  })));
  const failed = results.find((r) => r.status === 'rejected');
  if (failed) throw (failed as PromiseRejectedResult).reason;
  return results.map((r) => (r as PromiseFulfilledResult<T>).value);
}
