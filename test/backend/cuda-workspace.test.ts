// The CUDA activation workspace (host-side logic only: device memory is faked).

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { StepWorkspace } from '../../src/backend/cuda/workspace.js';

function fakeMemory() {
  let next = 1n << 20n;
  const live = new Map<bigint, number>();
  return {
    live,
    alloc: (bytes: number) => { const p = next; next += BigInt(bytes) + 4096n; live.set(p, bytes); return p; },
    free: (p: bigint) => { assert.ok(live.delete(p), 'freed once'); },
  };
}

/** A forward-like step: a residual, then per layer a few activations, the first reading the previous layer's last. */
function runStep(ws: StepWorkspace, numLayers: number, bytes: number) {
  const residual = ws.alloc(bytes);
  const perLayer: bigint[][] = [];
  for (let l = 0; l < numLayers; l++) {
    ws.beginLayer(l);
    perLayer.push([ws.alloc(bytes), ws.alloc(3 * bytes), ws.alloc(bytes)]);
  }
  ws.endLayers();
  const logits = ws.alloc(bytes);
  return { residual, perLayer, logits };
}

test('layer arenas alternate: layer l reuses layer l-2, never l-1 or step-lifetime memory', () => {
  const mem = fakeMemory();
  const ws = new StepWorkspace(mem, 1024);
  const bytes = 4096;
  runStep(ws, 28, bytes); // grows
  ws.reset();
  const { residual, perLayer, logits } = runStep(ws, 28, bytes);
  assert.ok(!ws.needsMerge, 'the second step fits the merged arenas');
  const ranges = (l: number) => perLayer[l]!.map((p, i) => [p, p + BigInt(i === 1 ? 3 * bytes : bytes)] as const);
  const overlaps = (a: readonly (readonly [bigint, bigint])[], b: readonly (readonly [bigint, bigint])[]) =>
    a.some(([s1, e1]) => b.some(([s2, e2]) => s1 < e2 && s2 < e1));
  for (let l = 1; l < 28; l++) assert.ok(!overlaps(ranges(l), ranges(l - 1)), `layer ${l} vs ${l - 1}`);
  for (let l = 2; l < 28; l++) assert.deepEqual(perLayer[l], perLayer[l - 2], `layer ${l} reuses ${l - 2}`);
  const stepRanges = [[residual, residual + BigInt(bytes)], [logits, logits + BigInt(bytes)]] as const;
  for (let l = 0; l < 28; l++) assert.ok(!overlaps(ranges(l), stepRanges), `layer ${l} vs the step arena`);
  // memory: about two layers' worth plus the step's, not 28 layers'
  const total = [...mem.live.values()].reduce((a, b) => a + b, 0);
  assert.ok(total < 6 * 5 * bytes, `${total} bytes held`);
  ws.reset();
  assert.deepEqual(runStep(ws, 28, bytes).perLayer, perLayer, 'same addresses step after step (graph replay)');
});

test('a frozen workspace (graph capture) refuses to grow in a layer arena', () => {
  const ws = new StepWorkspace(fakeMemory(), 1024);
  ws.frozen = true;
  ws.beginLayer(3);
  assert.throws(() => ws.alloc(1 << 20), /graph capture/);
});

test('an arena that spilled is replaced by one of the largest step\'s bytes, not the sum of its spill chunks', async () => {
  const { DeviceWorkspace } = await import('../../src/backend/cuda/workspace.js');
  const mem = fakeMemory();
  const ws = new DeviceWorkspace(mem, 1024);
  // one step of 1024 + 3 x 1280 bytes: chunks of 1024, 2048 (doubled), 2048 ... spill far beyond the 4864 it needs
  for (const bytes of [1024, 1280, 1280, 1280]) ws.alloc(bytes);
  assert.ok(ws.needsMerge);
  const spilled = ws.numBytes;
  ws.reset();
  assert.equal(ws.numBytes, 1024 + 3 * 1280, `merged arena (spill chunks held ${spilled})`);
  assert.ok(spilled > ws.numBytes);
  for (const bytes of [1024, 1280, 1280, 1280]) ws.alloc(bytes);
  assert.ok(!ws.needsMerge, 'the same step fits the merged arena');
  assert.equal([...mem.live.values()].reduce((a, b) => a + b, 0), 1024 + 3 * 1280);
});

test('a large arena that falls a little short spills a chunk of at most 64 MiB beyond the need, not its own size again', async () => {
  const { DeviceWorkspace } = await import('../../src/backend/cuda/workspace.js');
  const mem = fakeMemory();
  const ws = new DeviceWorkspace(mem, 2 ** 31);
  ws.alloc(2 ** 31 - 1024);
  ws.alloc(4 * 2 ** 20);
  const chunks = [...mem.live.values()];
  assert.deepEqual(chunks, [2 ** 31, 64 * 2 ** 20]);
});
