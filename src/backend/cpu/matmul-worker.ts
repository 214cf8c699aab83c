// Worker side of MatmulPool: drains its port synchronously (buffer registrations,
// matmul jobs), sleeping on the control word's generation between jobs; counts
// itself done after each matmul.

import { parentPort, receiveMessageOnPort, workerData, type MessagePort } from 'node:worker_threads';
import { matmulCols } from './kernels.js';
import { CONTROL, type PoolMessage } from './pool-protocol.js';

const { control: controlBuffer, port } = workerData as { control: SharedArrayBuffer; port: MessagePort };
const control = new Int32Array(controlBuffer);
const buffers = new Map<number, Float32Array>();

while (Atomics.load(control, CONTROL.stop) === 0) {
  const generation = Atomics.load(control, CONTROL.generation);
  const received = receiveMessageOnPort(port);
  if (received === undefined) {
    Atomics.wait(control, CONTROL.generation, generation, 200);
    continue;
  }
  const msg = received.message as PoolMessage;
  if (msg.kind === 'buffer') {
    buffers.set(msg.id, new Float32Array(msg.buffer));
  } else if (msg.kind === 'release') {
    buffers.delete(msg.id);
  } else {
    try {
      matmulCols(buffers.get(msg.x)!, msg.xOff, buffers.get(msg.w)!, msg.wOff, buffers.get(msg.y)!,
        msg.yOff, msg.T, msg.K, msg.N, msg.n0, msg.n1);
    } catch (err) {
      Atomics.store(control, CONTROL.failed, 1);
      parentPort?.postMessage(String(err));
    }
    Atomics.add(control, CONTROL.numDone, 1);
    Atomics.notify(control, CONTROL.numDone);
  }
}
port.close();
