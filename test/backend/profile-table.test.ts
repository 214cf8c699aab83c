// The CUDA profile table's arithmetic (no GPU needed): a step lasts its wall
// time when that exceeds the ops' span, and what no op covers is host gaps; and
// the Profiler times nested ops once (on a fake driver's events).

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { formatProfile, Profiler, profileTable } from '../../src/backend/cuda/profiler.js';
import type { DriverApi, Handle } from '../../src/backend/cuda/ffi/driver.js';

const ops = [
  { bucket: 'gemm qkv', startMs: 0, endMs: 2 }, { bucket: 'attention', startMs: 3, endMs: 4 },
  { bucket: 'gemm qkv', startMs: 4, endMs: 6 }, { bucket: 'norm', startMs: 9, endMs: 10 }];

test('profileTable charges wall time beyond the GPU span to host gaps; shares sum to 1', () => {
  const { rows, stepMs, gpuMs } = profileTable(ops, 16);
  assert.equal(stepMs, 16);
  assert.equal(gpuMs, 6);
  const by = Object.fromEntries(rows.map((r) => [r.bucket, r]));
  assert.equal(by['host gaps']!.totalMs, 10);
  assert.equal(by['gemm qkv']!.share, 4 / 16);
  assert.ok(Math.abs(rows.reduce((s, r) => s + r.share, 0) - 1) < 1e-12);
  assert.match(formatProfile(rows, stepMs, 'graph 8 (graph replay): step'), /^graph 8 \(graph replay\): step 16\.000 ms/);
});

test('profileTable without a wall time (or a shorter one) spans the ops', () => {
  for (const wallMs of [0, 5]) {
    const { rows, stepMs } = profileTable(ops, wallMs);
    assert.equal(stepMs, 10);
    assert.equal(rows.find((r) => r.bucket === 'host gaps')!.totalMs, 4);
  }
  assert.deepEqual(profileTable([]), { rows: [], stepMs: 0, gpuMs: 0 });
});

// A driver of fake events: each record stamps the event with a clock that moves 1 ms a record.
function fakeDriver(): { api: DriverApi; records: () => number } {
  let clock = 0;
  let next = 1n;
  const stamps = new Map<bigint, number>();
  const api = {
    cuEventCreate: (out: [unknown]) => { out[0] = next++; return 0; },
    cuEventRecord: (e: bigint) => { stamps.set(BigInt(e), clock++); return 0; },
    cuEventRecordWithFlags: (e: bigint) => { stamps.set(BigInt(e), clock++); return 0; },
    cuEventSynchronize: () => 0,
    cuEventElapsedTime_v2: (ms: [number], a: bigint, b: bigint) => {
      ms[0] = stamps.get(BigInt(b))! - stamps.get(BigInt(a))!;
      return 0;
    },
    cuEventDestroy_v2: () => 0,
  };
  return { api: api as unknown as DriverApi, records: () => clock };
}

test('a timed op inside another is not timed again: its launches count once, in the outer bucket', () => {
  const { api, records } = fakeDriver();
  const p = new Profiler(api, null as unknown as Handle, () => {});
  p.startStep('decode <=8 tokens');
  const got = p.time('deltanet conv', () => p.time('deltanet conv', () => p.time('other', () => 7)));
  assert.equal(got, 7, 'the inner result comes back');
  p.time('norm', () => undefined);
  assert.equal(records(), 4, 'two events an outer op, none for the nested ones');
  const rows = p.finishStep()!.rows;
  assert.deepEqual(rows.filter((r) => r.bucket !== 'host gaps').map((r) => [r.bucket, r.numCalls]).sort(),
    [['deltanet conv', 1], ['norm', 1]]);
  assert.throws(() => p.time('x', () => { throw new Error('boom'); }), /boom/);
  const before = records();
  p.time('after a throw', () => undefined);
  assert.equal(records(), before + 2, 'a throw inside an op leaves the next one timed');
});
