import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os, { tmpdir } from 'node:os';
import { join } from 'node:path';
import { BenchLockHeldError, acquireBenchLock, gpuPreflight, isLockStale, parseComputeApps } from '../../src/lab/lock.js';

function deadPid(): number {
  const r = spawnSync(process.execPath, ['-e', 'process.stdout.write(String(process.pid))'], { encoding: 'utf8' });
  return Number(r.stdout);
}

test('the lock is refused while held and free again once released', (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'quire-lock-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const lock = acquireBenchLock({ dir, owner: 'first' });
  const info = JSON.parse(readFileSync(lock.path, 'utf8')) as { pid: number; host: string; owner: string; startedAt: string };
  assert.deepEqual(info, { pid: process.pid, host: os.hostname(), owner: 'first', startedAt: lock.info.startedAt });
  assert.throws(
    () => acquireBenchLock({ dir, owner: 'second' }),
    (e: unknown) => e instanceof BenchLockHeldError && e.holder.owner === 'first' && /held by pid/.test(e.message),
  );
  lock.release();
  assert.equal(existsSync(lock.path), false);
  const again = acquireBenchLock({ dir, owner: 'second' });
  assert.equal(again.info.owner, 'second');
  again.release();
});

test('a lock whose pid is dead on this host, or that is too old, is stale and taken over', (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'quire-lock-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const path = join(dir, 'gpu.lock');
  const pid = deadPid();
  writeFileSync(path, JSON.stringify({ pid, host: os.hostname(), owner: 'gone', startedAt: new Date().toISOString() }));
  const lock = acquireBenchLock({ dir, owner: 'me' });
  assert.equal(lock.info.owner, 'me');
  lock.release();

  const now = Date.now();
  const otherHost = { pid: 1, host: 'elsewhere', owner: 'x', startedAt: new Date(now - 1000).toISOString() };
  assert.equal(isLockStale(otherHost, now, 60_000), false, 'a live-looking lock from another host is respected');
  assert.equal(isLockStale({ ...otherHost, startedAt: new Date(now - 120_000).toISOString() }, now, 60_000), true);
  assert.equal(isLockStale({ pid: process.pid, host: os.hostname(), owner: 'me', startedAt: new Date(now).toISOString() }, now, 60_000), false);
  assert.equal(isLockStale({ pid, host: os.hostname(), owner: 'gone', startedAt: new Date(now).toISOString() }, now, 60_000), true);

  writeFileSync(path, JSON.stringify(otherHost));
  assert.throws(() => acquireBenchLock({ dir }), BenchLockHeldError);
  const forced = acquireBenchLock({ dir, force: true, owner: 'forced' });
  assert.equal(forced.info.owner, 'forced');
  forced.release();
});

test('GPU preflight refuses other compute processes unless forced', () => {
  const csv = '4242, /usr/bin/python3, 20480\n777, vllm, serve, 1024 MiB\n';
  assert.deepEqual(parseComputeApps(csv), [
    { pid: 4242, processName: '/usr/bin/python3', usedMemoryMiB: 20480 },
    { pid: 777, processName: 'vllm, serve', usedMemoryMiB: 1024 },
  ]);
  const run = (cmd: string, args: string[]) => (cmd === 'nvidia-smi' && args[0]!.startsWith('--query-compute-apps') ? csv : null);
  assert.throws(() => gpuPreflight({ run }), /in use by other processes: pid 4242 \/usr\/bin\/python3 \(20480 MiB\); pid 777/);
  assert.throws(() => gpuPreflight({ run }), /pass --force to run anyway/);
  assert.deepEqual(gpuPreflight({ run, force: true }).overridden, true);
  // bench serve: the servers under test are on the GPU, listed but not refused
  assert.deepEqual(gpuPreflight({ run, expectOthers: true }).others.map((p) => p.pid), [4242, 777]);
  assert.equal(gpuPreflight({ run, ownPids: [4242, 777] }).others.length, 0);
  assert.deepEqual(gpuPreflight({ run: () => null }), { checked: false, others: [], overridden: false });
  assert.equal(gpuPreflight({ run: () => '' }).checked, true);
});

test('the lock is released when its process exits', (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'quire-lock-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const lockModule = new URL('../../src/lab/lock.js', import.meta.url).href;
  const script = `import { acquireBenchLock } from ${JSON.stringify(lockModule)}; const l = acquireBenchLock({ dir: ${JSON.stringify(dir)}, owner: 'child' }); console.log(l.path);`;
  const r = spawnSync(process.execPath, ['--input-type=module', '-e', script], { encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
  const path = r.stdout.trim();
  assert.equal(path, join(dir, 'gpu.lock'));
  assert.equal(existsSync(path), false);
});

for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  test(`the lock is released when the benchmark is ended by ${signal} (Ctrl-C, kill), and the process still ends`, async (t) => {
    const dir = mkdtempSync(join(tmpdir(), 'quire-lock-'));
    t.after(() => rmSync(dir, { recursive: true, force: true }));
    const { spawn } = await import('node:child_process');
    const lockModule = new URL('../../src/lab/lock.js', import.meta.url).href;
    const child = spawn(process.execPath, ['--input-type=module', '-e',
      `const { acquireBenchLock } = await import(${JSON.stringify(lockModule)});
       acquireBenchLock({ dir: ${JSON.stringify(dir)}, owner: 'child' });
       console.log('locked');
       setInterval(() => {}, 1000);`], { stdio: ['ignore', 'pipe', 'inherit'] });
    await new Promise<void>((resolve) => child.stdout!.on('data', (d: Buffer) => { if (d.toString().includes('locked')) resolve(); }));
    assert.equal(existsSync(join(dir, 'gpu.lock')), true);
    const exited = new Promise<NodeJS.Signals | null>((resolve) => child.on('exit', (_code, sig) => resolve(sig)));
    child.kill(signal);
    assert.equal(await exited, signal, 'the signal still ends the process');
    assert.equal(existsSync(join(dir, 'gpu.lock')), false, 'the lock file is gone');
  });
}
