// Worker side of MatmulPool: drains its port synchronously (buffer registrations,
// matmul jobs), sleeping on the control word's generation between jobs; takes
// column chunks of each matmul until none is left, then counts itself done.

import { parentPort, receiveMessageOnPort, workerData, type MessagePort } from 'node:worker_threads';
import { CONTROL, makeKernel, runChunks, type KernelSetup, type PoolMessage } from './pool-protocol.js';

const { control: controlBuffer, port, setup } = workerData as {
  control: SharedArrayBuffer; port: MessagePort; setup: KernelSetup;
};
const control = new Int32Array(controlBuffer);
const buffers = new Map<number, Float32Array>();
const kernel = makeKernel(setup, buffers);

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
      runChunks(control, kernel, msg);
    } catch (err) {
      Atomics.store(control, CONTROL.failed, 1);
      parentPort?.postMessage(String(err));
    }
    Atomics.add(control, CONTROL.numDone, 1);
    Atomics.notify(control, CONTROL.numDone);
  }
}
port.close();
