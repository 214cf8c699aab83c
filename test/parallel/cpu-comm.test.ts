// The CPU communicator (ranks as worker threads): every collective gives every rank the right values, messages
// larger than a slot go in chunks, point-to-point messages arrive whole and in order, and a rank that aborts or
// never comes makes the others throw instead of hang, naming why where it said.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { bf16BitsToF32, f16BitsToF32 } from '../../src/loader/dtype.js';
import { CpuCommunicator, createCpuCommGroup } from '../../src/parallel/cpu-comm.js';
import type { CommWorkerData } from './comm-worker.js';
import { contribution, stageMessage } from './tp-math.js';
import { runRanks } from './ranks.js';

const WORKER = new URL('./comm-worker.js', import.meta.url);

interface Collectives {
  f32: Float32Array;
  bf16: Uint16Array;
  f16: Uint16Array;
  i32: Int32Array;
  gathered: Float32Array;
  bcast: Int32Array;
}

for (const size of [2, 3, 4]) {
  test(`${size} ranks: all-reduce (f32, bf16, f16, i32), all-gather and broadcast, through 64-byte slots`, async () => {
    // 64-byte slots: 16 f32 or 32 bf16 a chunk, so 100 elements take 4 to 7 chunks
    const group = createCpuCommGroup(size, { slotBytes: 64, timeoutMs: 20_000 });
    const out = await runRanks<Collectives>(WORKER, size, (rank): CommWorkerData => ({ group, rank, scenario: 'collectives' }));
    const ranks = Array.from({ length: size }, (_, r) => r);
    for (const [rank, o] of out.entries()) {
      for (let i = 0; i < 100; i++) {
        assert.equal(o.f32[i], ranks.reduce((a, r) => a + r * 1000, 0) + size * i * 0.5, `rank ${rank} f32[${i}]`);
        const want = ranks.reduce((a, r) => a + contribution(r, i), 0);
        assert.equal(bf16BitsToF32(o.bf16[i]!), want, `rank ${rank} bf16[${i}]`);
        assert.equal(f16BitsToF32(o.f16[i]!), want / 4, `rank ${rank} f16[${i}]`);
        assert.equal(o.i32[i], ranks.reduce((a, r) => a + r * 100_000, 0) + size * i);
      }
      for (const r of ranks) {
        for (let i = 0; i < 37; i++) assert.equal(o.gathered[r * 37 + i], Math.fround(r + i / 100), `rank ${rank} gathered ${r}:${i}`);
      }
      assert.deepEqual([...o.bcast], Array.from({ length: 50 }, (_, i) => 7 * i + 1), `rank ${rank} broadcast`);
    }
  });
}

for (const size of [2, 3, 4]) {
  test(`${size} ranks in a pipeline: each receives the messages of the rank before it whole and in order, through 64-byte mailboxes`, async () => {
    const group = createCpuCommGroup(size, { slotBytes: 64, timeoutMs: 20_000, p2p: true });
    const out = await runRanks<number[][]>(WORKER, size, (rank): CommWorkerData => ({ group, rank, scenario: 'pipeline' }));
    assert.deepEqual(out[0], []);
    for (let rank = 1; rank < size; rank++) {
      assert.deepEqual(out[rank], [5, 70, 3].map((n, k) => [...stageMessage(rank - 1, k, n)]), `rank ${rank}`);
    }
  });
}

test('a rank that aborts with a reason makes the rank receiving from it throw, naming the reason', async () => {
  const group = createCpuCommGroup(2, { timeoutMs: 20_000, p2p: true });
  const [zero, one] = await runRanks<string>(WORKER, 2, (rank): CommWorkerData => ({ group, rank, scenario: 'p2p-abort' }));
  assert.equal(zero, 'aborted');
  assert.match(one!, /recv from rank 0: the communicator group was aborted \(rank 1\): pipeline stage 0 \(rank 1\): out of memory/);
});

test('point to point in one thread: a send waits for its mailbox to empty (timing out alone), peers and groups checked', () => {
  const group = createCpuCommGroup(2, { slotBytes: 16, timeoutMs: 100, p2p: true });
  const zero = new CpuCommunicator(group, 0);
  const one = new CpuCommunicator(group, 1);
  zero.send(Float32Array.from([1, 2, 3, 4]), 4, 'f32', 1);  // one slot: handed over, the sender goes on
  const got = new Float32Array(4);
  one.recv(got, 4, 'f32', 0);
  assert.deepEqual([...got], [1, 2, 3, 4]);
  zero.send(Float32Array.from([5, 6, 7, 8]), 4, 'f32', 1);
  // the mailbox is full and no one empties it: the second send waits its timeout out and aborts the group
  assert.throws(() => zero.send(Float32Array.from([9]), 1, 'f32', 1), /send to rank 1: rank 0 waited 100 ms; group aborted/);
  assert.throws(() => one.recv(got, 4, 'f32', 0), /aborted \(rank 1\): rank 0 waited 100 ms in send to rank 1/);
  const plain = new CpuCommunicator(createCpuCommGroup(2), 0);
  assert.throws(() => plain.send(got, 4, 'f32', 1), /made without p2p/);
  assert.throws(() => new CpuCommunicator(createCpuCommGroup(2, { p2p: true }), 0).send(got, 4, 'f32', 0), /peer 0 is not another rank of 2/);
});

test('a rank that aborts makes the others\' collective throw; a rank that never comes times the others out', async () => {
  const shared = createCpuCommGroup(2, { timeoutMs: 20_000 });
  const [zero, one] = await runRanks<string>(WORKER, 2, (rank): CommWorkerData => ({ group: shared, rank, scenario: 'abort' }));
  assert.equal(one, 'aborted');
  assert.match(zero!, /allReduceSum: the communicator group was aborted \(rank 0\)/);
  const slow = createCpuCommGroup(2, { timeoutMs: 200 });
  const [timedOut] = await runRanks<string>(WORKER, 2, (rank): CommWorkerData => ({ group: slow, rank, scenario: 'timeout' }));
  assert.match(timedOut!, /broadcast: rank 0 waited 200 ms for the other ranks; group aborted/);
});

test('one rank in this thread: collectives are copies; wrong array types and short buffers are refused', () => {
  const comm = new CpuCommunicator(createCpuCommGroup(1, { slotBytes: 16 }), 0);
  const x = Float32Array.from({ length: 10 }, (_, i) => i + 0.25);
  comm.allReduceSum(x, 10, 'f32');
  assert.deepEqual([...x], Array.from({ length: 10 }, (_, i) => i + 0.25));
  const recv = new Float32Array(10);
  comm.allGather(x, recv, 10, 'f32');
  assert.deepEqual(recv, x);
  assert.throws(() => comm.allReduceSum(x, 10, 'bf16'), /bf16 needs a Uint16Array, got Float32Array/);
  assert.throws(() => comm.allReduceSum(x, 11, 'f32'), /buffer of 10 elements, need 11/);
  assert.throws(() => comm.broadcast(x, 10, 'f32', 1), /root 1 is not a rank/);
  assert.throws(() => new CpuCommunicator(createCpuCommGroup(2), 2), /rank 2 is not in \[0, 2\)/);
  comm.destroy();
  assert.throws(() => comm.allReduceSum(x, 10, 'f32'), /destroyed communicator/);
});
