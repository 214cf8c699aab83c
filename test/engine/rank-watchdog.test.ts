// The watchdog of child-process ranks (engine/tp/rank-watchdog.ts), in processes of their own: a rank that dies while
// the parent's thread is blocked (as in a cuEventSynchronize whose collective waits on it) ends the other ranks and
// the parent with a message naming it; a parent whose loop took the failure in (handled) or that stopped the watch
// (shutdown) lives on.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { processAlive } from '../../src/engine/tp/rank-watchdog.js';

const WATCHDOG = new URL('../../src/engine/tp/rank-watchdog.js', import.meta.url).href;

/**
 * A parent process that starts two ranks (one exits after 150 ms, one lives), watches them, then runs `then`;
 * prints the living rank's pid first.
 */
function parent(then: string): Promise<{ code: number | null; signal: NodeJS.Signals | null; stdout: string; stderr: string }> {
  const script = `
    import { spawn } from 'node:child_process';
    import { watchRanks } from ${JSON.stringify(WATCHDOG)};
    const dies = spawn(process.execPath, ['-e', 'setTimeout(() => process.exit(3), 150)'], { stdio: 'ignore' });
    const lives = spawn(process.execPath, ['-e', 'setInterval(() => {}, 1000)'], { stdio: 'ignore' });
    console.log(lives.pid);
    const watchdog = watchRanks([{ pid: dies.pid, label: 'rank 1 (tp 1)' }, { pid: lives.pid, label: 'rank 2 (tp 2)' }],
      { pollMs: 25, graceMs: 300 });
    const block = (ms) => Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
    ${then}
    lives.kill('SIGKILL');
    console.log('lived');`;
  return new Promise((resolve) => {
    const p = spawn(process.execPath, ['--input-type=module', '-e', script], { stdio: ['ignore', 'pipe', 'pipe'] });
    let [stdout, stderr] = ['', ''];
    p.stdout.on('data', (d: Buffer) => { stdout += d.toString(); });
    p.stderr.on('data', (d: Buffer) => { stderr += d.toString(); });
    p.on('close', (code, signal) => resolve({ code, signal, stdout, stderr }));
  });
}

test('a rank that dies while the parent is blocked: the other ranks and the parent end, the dead rank named', async () => {
  // blocked 20 s, as a step waiting on a collective whose peer is gone would be forever
  const r = await parent('block(20_000);');
  assert.equal(r.signal, 'SIGKILL', `${r.code} ${r.stderr}`);
  assert.doesNotMatch(r.stdout, /lived/);
  assert.match(r.stderr, /rank 1 \(tp 1\) \(pid \d+\) exited, and a collective waiting on it would never end/);
  const lives = Number(r.stdout.split('\n')[0]);
  assert.ok(Number.isInteger(lives) && lives > 0, r.stdout);
  // SIGKILL was sent before the parent killed itself, but a loaded machine may not have run its end yet (a CI run
  // saw it alive at the first look): up to 2 s
  for (let t = 0; t < 40 && processAlive(lives); t++) await new Promise((r) => setTimeout(r, 50));
  assert.equal(processAlive(lives), false, 'the living rank was killed too');
});

test('a parent whose loop took the failure in (handled) lives on; so does one that stopped the watch', async () => {
  const handled = await parent('block(400); watchdog.handled(); block(1_000);');
  // the death is seen within the first block, the grace runs out within the second unless handled() stood it down
  assert.equal(handled.code, 0, handled.stderr);
  assert.match(handled.stdout, /lived/);
  const stopped = await parent('watchdog.stop(); block(1_000);');
  assert.equal(stopped.code, 0, stopped.stderr);
  assert.match(stopped.stdout, /lived/);
});

test('processAlive: this process is, a reaped child is not, a zombie is not', () => {
  assert.equal(processAlive(process.pid), true);
  const done = spawnSync(process.execPath, ['-e', '0']);
  assert.equal(done.status, 0);
  assert.equal(processAlive(done.pid!), false);
  // a child that has exited but is not reaped yet: this thread blocks, so its exit is not taken in
  const child = spawn(process.execPath, ['-e', '0'], { stdio: 'ignore' });
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 1_000);
  assert.equal(processAlive(child.pid!), false, 'an exited, unreaped child');
});
