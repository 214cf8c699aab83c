// Runs a test file again in a child process with a knob set: knobs read once at import (a kernel #define) cannot be
// flipped inside one process, so a test that compares a knob's bits with the default's reruns its own file.

import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';

/**
 * Runs the test file `fileUrl` again in a child process with `env` added, only its tests matching `namePattern` where
 * given; asserts that the child passed and returns its TAP stdout. NODE_TEST_CONTEXT is dropped: the runner sets it
 * in every test process, and a child that inherits it reports in the runner's binary protocol, so its stdout is empty.
 */
export function rerunWith(fileUrl: string, env: Record<string, string>, namePattern?: string): string {
  const childEnv: NodeJS.ProcessEnv = { ...process.env, ...env };
  delete childEnv.NODE_TEST_CONTEXT;
  const r = spawnSync(process.execPath, ['--test', ...(namePattern ? [`--test-name-pattern=${namePattern}`] : []),
    fileURLToPath(fileUrl)], { env: childEnv, encoding: 'utf8' });
  assert.equal(r.status, 0, `${r.stdout.slice(-3000)}${r.stderr.slice(-2000)}`);
  return r.stdout;
}
