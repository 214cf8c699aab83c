// No stack trace reaches a user from any quire command: a failure is one line naming what went wrong (the file, the
// flag), and the exit code is not 0.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { errorLine } from '../../src/cli/errors.js';

const main = resolve('dist', 'src', 'cli', 'main.js');

test('every subcommand\'s failure is one quire: line and a non-zero exit, never a stack trace', (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'quire-errors-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const lock = ['--force', '--lock-dir', join(dir, 'lock')];
  for (const [argv, message] of [
    [['serve', '--model', '/no/such/model', '--port', '0'], /quire: model: model directory \/no\/such\/model not found/],
    [['generate', '--prompt', 'hi', '--model', '/no/such/model'], /model directory \/no\/such\/model not found/],
    [['chat', '--model', '/no/such/model'], /model directory \/no\/such\/model not found/],
    [['bench', 'offline', '--model', '/no/such/model', ...lock], /model directory \/no\/such\/model not found/],
    [['bench', 'decode', '--model', '/no/such/model', ...lock], /model directory \/no\/such\/model not found/],
    [['bench', 'serve', '--target', 'a=http://127.0.0.1:1', '--model', 'm', '--workload', 'custom', '--concurrency', '1', ...lock],
      /quire: probing a \(http:\/\/127\.0\.0\.1:1\) failed/],
    [['bench', 'serve', '--target', 'a=http://127.0.0.1:1', '--model', 'm', '--gates', '/no/such.json', ...lock],
      /quire: \/no\/such\.json: no such file or directory/],
    [['gate', '--model', '/no/such/model'], /model directory \/no\/such\/model not found/],
    [['make-test-model', '--shape', 'bogus', '--out', join(dir, 'm')], /quire: unknown shape "bogus"/],
    [['serve', '--max-num-seqs', '0'], /'--max-num-seqs <n>' argument '0' is invalid/],
  ] as const) {
    const r = spawnSync(process.execPath, [main, ...argv], { encoding: 'utf8', input: '', timeout: 60_000 });
    const out = `${r.stdout}${r.stderr}`;
    assert.notEqual(r.status, 0, `${argv.join(' ')} exits non-zero`);
    assert.match(out, message, argv.join(' '));
    assert.doesNotMatch(out, /^\s+at /m, `${argv.join(' ')}: no stack trace in\n${out}`);
  }
});

test('errorLine: a file error names the file; an internal error says it is one', () => {
  const enoent = Object.assign(new Error('ENOENT: no such file or directory, open \'/x.json\''), { code: 'ENOENT', path: '/x.json' });
  assert.equal(errorLine(enoent), 'quire: /x.json: no such file or directory');
  assert.match(errorLine(new TypeError('x is not a function')), /^quire: internal error \(TypeError\): x is not a function; please report it/);
  assert.equal(errorLine(new Error('plain')), 'quire: plain');
});
