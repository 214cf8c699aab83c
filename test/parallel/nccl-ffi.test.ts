// NCCL without a GPU: discovery (the wheel's folder, the error that says what to install), that nothing but the
// parallel layer's lazy path opens libnccl, and the binding's plumbing against a stand-in library with NCCL's ABI
// (test/fixtures/fake-nccl.c, compiled here when a C compiler is present) that logs every argument it receives.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import koffi from 'koffi';
import { libraryCandidates, loadLibrary, LibraryNotFoundError } from '../../src/backend/cuda/ffi/discover.js';
import { formatNcclVersion, ncclApi, ncclCommInit, ncclLoaded, ncclUniqueId, ncclVersion, NcclError } from '../../src/backend/cuda/ffi/nccl.js';
import { createNcclCommunicator } from '../../src/parallel/comm.js';
import { CpuCommunicator, createCpuCommGroup } from '../../src/parallel/cpu-comm.js';
import { ncclGroup } from '../../src/parallel/nccl-comm.js';
import { repoRoot } from '../loader/helpers.js';

test('discovery finds libnccl.so.2 in the nvidia-nccl-cu12 wheel and says what to install when it is missing', () => {
  const root = mkdtempSync(join(tmpdir(), 'quire-nccl-'));
  try {
    const lib = join(root, 'lib', 'python3.11', 'site-packages', 'nvidia', 'nccl', 'lib');
    mkdirSync(lib, { recursive: true });
    writeFileSync(join(lib, 'libnccl.so.2'), '');
    const env = { VIRTUAL_ENV: root, LD_LIBRARY_PATH: '' };
    assert.equal(libraryCandidates('nccl', env)[0], join(lib, 'libnccl.so.2'));
    const err = (() => {
      try {
        loadLibrary('nccl', () => { throw new Error('nope'); }, env);
      } catch (e) {
        return e;
      }
      return null;
    })();
    assert.ok(err instanceof LibraryNotFoundError);
    assert.match(err.message, /libnccl\.so\.2 not found/);
    assert.match(err.message, /nvidia\/nccl\/lib/);
    assert.match(err.message, /pip install nvidia-nccl-cu12/);
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
});

function sourceFiles(dir: string): string[] {
  return readdirSync(dir).flatMap((n) => {
    const p = join(dir, n);
    return statSync(p).isDirectory() ? sourceFiles(p) : p.endsWith('.ts') ? [p] : [];
  });
}

test('single-GPU paths never open NCCL: only src/parallel reaches the binding, and only through a dynamic import', () => {
  // importing the parallel layer, the CPU communicator and the checks (this file did) opens nothing
  new CpuCommunicator(createCpuCommGroup(1), 0).destroy();
  assert.equal(ncclLoaded(), false);
  const src = join(repoRoot(), 'src');
  const importers: string[] = [];
  for (const file of sourceFiles(src)) {
    const text = readFileSync(file, 'utf8');
    const rel = file.slice(src.length + 1);
    // value imports only: a type-only import is erased and loads nothing
    for (const m of text.matchAll(/(?:^|\n)\s*(import|export)\s+(type\s+)?[^;'"]*?from\s*'([^']*(?:ffi\/nccl|nccl-comm)\.js)'/g)) {
      if (!m[2]) importers.push(`${rel} -> ${m[3]}`);
    }
    for (const m of text.matchAll(/\bimport\(\s*'([^']*(?:ffi\/nccl|nccl-comm)\.js)'\s*\)/g)) importers.push(`${rel} -> dynamic ${m[1]}`);
  }
  assert.deepEqual(importers.sort(), [
    'parallel/bench-allreduce.ts -> ../backend/cuda/ffi/nccl.js',
    'parallel/bench-allreduce.ts -> ./nccl-comm.js',
    'parallel/comm.ts -> dynamic ../backend/cuda/ffi/nccl.js',
    'parallel/comm.ts -> dynamic ./nccl-comm.js',
    'parallel/nccl-comm.ts -> ../backend/cuda/ffi/nccl.js',
    'parallel/pp-rank.ts -> dynamic ./nccl-comm.js',
  ]);
});

const compiler = spawnSync('cc', ['--version']).status === 0;

test('the binding against a stand-in libnccl: arguments, enum values, the unique id by value, errors', { skip: compiler ? false : 'no C compiler (cc)' }, async () => {
  const dir = mkdtempSync(join(tmpdir(), 'quire-fake-nccl-'));
  try {
    const so = join(dir, 'libnccl.so.2');
    const cc = spawnSync('cc', ['-shared', '-fPIC', '-o', so, join(repoRoot(), 'test', 'fixtures', 'fake-nccl.c')], { encoding: 'utf8' });
    assert.equal(cc.status, 0, cc.stderr);
    const api = ncclApi({ LD_LIBRARY_PATH: dir });
    assert.ok(ncclLoaded());
    const fake = koffi.load(so);
    const log = fake.func('const char *fake_log(void)') as () => string;
    const clear = fake.func('void fake_clear(void)') as () => void;
    const setAsync = fake.func('void fake_set_async_error(int e)') as (e: number) => void;
    const lines = (): string[] => { const l = log().split('\n').filter((x) => x !== ''); clear(); return l; };

    assert.equal(ncclVersion(), 22703);
    assert.equal(formatNcclVersion(22703), '2.27.3');
    assert.equal(formatNcclVersion(2804), '2.8.4');
    const id = ncclUniqueId();
    assert.deepEqual([...id.subarray(0, 4)], [1, 4, 7, 10]);
    let idSum = 0;
    id.forEach((b, i) => { idSum = (idSum + b * (i + 1)) >>> 0; });
    lines();
    // the 128 bytes arrive whole, by value, between nranks and rank
    assert.equal(ncclCommInit(2, id, 1), 0x1001n);
    assert.deepEqual(lines(), [`ncclCommInitRank nranks=2 rank=1 idsum=${idSum}`]);
    assert.equal(ncclCommInit(4, id, 3, 0), 0x2003n);
    assert.deepEqual(lines(), [`ncclCommInitRankConfig nranks=4 rank=3 idsum=${idSum} size=20 magic=cafebeef version=21400 blocking=0`]);
    assert.throws(() => ncclCommInit(2, new Uint8Array(64), 0), /ncclUniqueId is 128 bytes, got 64/);

    const comm = await createNcclCommunicator({ rank: 0, size: 2, id, stream: 0xabcn });
    lines();
    comm.allReduceSum(0x7f0000001000n, 1 << 24, 'bf16');
    comm.allReduceSum(0x7f0000002000n, 256, 'f32');
    comm.allGather(0x10n, 0x20n, 3, 'f16');
    comm.broadcast(0x30n, 5, 'i32', 1);
    ncclGroup(() => comm.allReduceSum(0x40n, 2, 'f32'));
    // pipeline stages' point to point: the peer and the stream pass through; a stage's two tensors go as one group
    ncclGroup(() => {
      comm.send(0x70n, 6, 'bf16', 1);
      comm.recv(0x80n, 7, 'f32', 1);
    });
    comm.checkAsyncError();
    assert.deepEqual(lines(), [
      'ncclAllReduce send=7f0000001000 recv=7f0000001000 count=16777216 datatype=9 op=0 comm=1000 stream=abc',
      'ncclAllReduce send=7f0000002000 recv=7f0000002000 count=256 datatype=7 op=0 comm=1000 stream=abc',
      'ncclAllGather send=10 recv=20 count=3 datatype=6 comm=1000 stream=abc',
      'ncclBroadcast send=30 recv=30 count=5 datatype=2 root=1 comm=1000 stream=abc',
      'ncclGroupStart',
      'ncclAllReduce send=40 recv=40 count=2 datatype=7 op=0 comm=1000 stream=abc',
      'ncclGroupEnd',
      'ncclGroupStart',
      'ncclSend send=70 count=6 datatype=9 peer=1 comm=1000 stream=abc',
      'ncclRecv recv=80 count=7 datatype=7 peer=1 comm=1000 stream=abc',
      'ncclGroupEnd',
      'ncclCommGetAsyncError comm=1000',
    ]);
    // a failed call names itself, NCCL's text for the status and its last error
    assert.throws(() => comm.allReduceSum(0x50n, 0, 'f32'), (e: unknown) => e instanceof NcclError &&
      e.message === 'ncclAllReduce(0 f32, rank 0) failed: fake error 4 (4): fake last error');
    setAsync(6);
    assert.throws(() => comm.checkAsyncError(), /NCCL \(asynchronous error, rank 0\) failed: fake error 6 \(6\)/);
    setAsync(0);
    comm.destroy();
    comm.destroy();
    assert.throws(() => comm.allReduceSum(0x60n, 1, 'f32'), /communicator destroyed/);
    assert.ok(lines().includes('ncclCommDestroy comm=1000'));
    assert.equal(api.ncclGetErrorString(3), 'fake error 3');
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
