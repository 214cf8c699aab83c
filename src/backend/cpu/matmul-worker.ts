// Worker side of MatmulPool: drains its port synchronously (buffer registrations,
// matmul jobs), sleeping on the control word's generation between jobs; takes
// column chunks of a matmul (or attention units) until none is left, then counts
// itself done.

import { parentPort, receiveMessageOnPort, workerData, type MessagePort } from 'node:worker_threads';
import { CONTROL, makeKernel, runAttentionUnits, runChunks, type KernelSetup, type PoolMessage } from './pool-protocol.js';
import { instantiateWasmAttention } from './wasm-attention.js';

const { control: controlBuffer, port, setup, threadIndex } = workerData as {
  control: SharedArrayBuffer; port: MessagePort; setup: KernelSetup; threadIndex: number;
};
const control = new Int32Array(controlBuffer);
const buffers = new Map<number, Float32Array>();
const kernel = makeKernel(setup, buffers);
const attention = setup.kind === 'wasm' ? instantiateWasmAttention(setup.memory) : null;

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
      if (msg.kind === 'matmul') runChunks(control, kernel, msg);
      else if (attention && setup.kind === 'wasm') runAttentionUnits(control, attention, setup.memory, msg, msg.numUnits, threadIndex);
      else throw new Error('attention jobs need the wasm kernel');
    } catch (err) {
      Atomics.store(control, CONTROL.failed, 1);
      parentPort?.postMessage(String(err));
    }
    Atomics.add(control, CONTROL.numDone, 1);
    Atomics.notify(control, CONTROL.numDone);
  }
}
port.close();
