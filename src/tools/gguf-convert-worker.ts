// A worker thread of modelDirToGgufParallel (gguf-convert.ts): opens the model directory's weights once, then
// converts each task it is handed (a tensor, or rows of one) and sends the bytes back (moved, not copied).
import { parentPort, workerData } from 'node:worker_threads';
import { openWeights } from '../loader/model-dir.js';
import { convertTensor, type TensorJob } from './gguf-convert.js';

const weights = openWeights((workerData as { dir: string }).dir);
parentPort!.on('message', ({ job, task }: { job: TensorJob; task: { r0: number; r1: number } }) => {
  const data = convertTensor(weights, job, task.r0, task.r1);
  parentPort!.postMessage({ task, data }, [data.buffer as ArrayBuffer]);
});
