// scripts/test-reporter.mjs, the reporter `npm test` runs with: TAP for failures only, skips with their reason,
// a closing summary line always.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';

function runWithReporter(source: string): { status: number | null; stdout: string } {
  const dir = mkdtempSync(join(tmpdir(), 'quire-reporter-'));
  try {
    const file = join(dir, 'sample.test.mjs');
    writeFileSync(file, source);
    const r = spawnSync(process.execPath, ['--test', `--test-reporter=${resolve('scripts/test-reporter.mjs')}`, file],
      { encoding: 'utf8', env: { ...process.env, NODE_TEST_CONTEXT: undefined } });
    return { status: r.status, stdout: r.stdout };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

const HEADER = "import { test } from 'node:test';\nimport assert from 'node:assert/strict';\n";

test('passing tests print only the summary line; a skip prints its reason', () => {
  const r = runWithReporter(`${HEADER}
test('first', () => { console.log('noise on stdout'); });
test('second', () => {});
test('needs a tool', { skip: 'no tool here' }, () => {});
`);
  assert.equal(r.status, 0);
  const lines = r.stdout.trim().split('\n');
  assert.equal(lines.length, 2, r.stdout);
  assert.match(lines[0]!, /^skip: needs a tool \(no tool here\)/);
  assert.match(lines[1]!, /^tests: 2 passed, 0 failed, 1 skipped, 0 todo, 0 cancelled \(\d+\.\d s\)$/);
  assert.doesNotMatch(r.stdout, /noise|TAP|^ok /m);
});

test('a failure prints as TAP with its file\'s output, then the summary; the exit status is 1', () => {
  const r = runWithReporter(`${HEADER}
test('fine', () => {});
test('broken', () => { console.error('what the test said'); assert.equal(1, 2); });
`);
  assert.equal(r.status, 1);
  assert.match(r.stdout, /^TAP version 13$/m);
  assert.match(r.stdout, /^not ok \d+ - broken$/m);
  assert.doesNotMatch(r.stdout, /^ok \d+ - fine$/m);
  assert.match(r.stdout, /#   what the test said/);
  assert.match(r.stdout.trim().split('\n').at(-1)!, /^tests: 1 passed, 1 failed, 0 skipped/);
});
