// A child rank's node flags (rank-port.ts rankExecArgv): an engine started from `node -e` code must not hand the code
// (or --input-type) to its child ranks, which then ran it again or failed to start (session 35's GPU run:
// ERR_INPUT_TYPE_NOT_ALLOWED); the flags that are not about what to run pass through. And a child rank's end
// (endChild): SIGTERM, then SIGKILL for one that does not end on it (session 35: node 1's rank spun on after closing).

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { endChild, rankExecArgv } from '../../src/engine/tp/rank-port.js';

test('rankExecArgv drops -e / --eval / -p / --print with their code and --input-type, in every spelling', () => {
  assert.deepEqual(rankExecArgv(['--input-type=module', '-e', 'code', '--no-warnings']), ['--no-warnings']);
  assert.deepEqual(rankExecArgv(['--input-type', 'module', '--eval', 'code']), []);
  assert.deepEqual(rankExecArgv(['--eval=code', '--max-old-space-size=4096', '-p', 'x']), ['--max-old-space-size=4096']);
  assert.deepEqual(rankExecArgv(['--enable-source-maps', '--print=1']), ['--enable-source-maps']);
});

test('rankExecArgv of a real `node --input-type=module -e` process keeps only its other flags', () => {
  const url = new URL('../../src/engine/tp/rank-port.js', import.meta.url).href;
  const r = spawnSync(process.execPath, ['--no-warnings', '--input-type=module', '-e',
    `import { rankExecArgv } from ${JSON.stringify(url)}; console.log(JSON.stringify(rankExecArgv(process.execArgv)))`],
  { encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
  assert.deepEqual(JSON.parse(r.stdout), ['--no-warnings']);
});

test('endChild ends a child deaf to SIGTERM with SIGKILL after the grace, and one that heeds SIGTERM with it', async () => {
  const deaf = spawn(process.execPath, ['-e', 'process.on("SIGTERM", () => {}); console.log("up"); setInterval(() => {}, 1000)'],
    { stdio: ['ignore', 'pipe', 'ignore'] });
  await new Promise((r) => deaf.stdout!.once('data', r));  // its handler is installed
  await endChild(deaf, 300);
  assert.equal(deaf.signalCode, 'SIGKILL');
  const heeds = spawn(process.execPath, ['-e', 'console.log("up"); setInterval(() => {}, 1000)'], { stdio: ['ignore', 'pipe', 'ignore'] });
  await new Promise((r) => heeds.stdout!.once('data', r));
  await endChild(heeds, 60_000);
  assert.equal(heeds.signalCode, 'SIGTERM');
  await endChild(heeds, 300);  // an ended child: nothing to do
});
