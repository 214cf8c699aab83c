// bench-gemm's --shapes (src/lab/bench-gemm.ts): N:K pairs in order; anything else is refused naming the bad pair,
// by the CLI too, before any device starts. (The timing itself runs on the GPU host: docs/perf-log.md, session 46.)

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { parseShapes } from '../../src/lab/bench-gemm.js';

test('--shapes reads N:K pairs in order', () => {
  assert.deepEqual(parseShapes('5120:17408,34816:5120'), [[5120, 17408], [34816, 5120]]);
  assert.deepEqual(parseShapes(' 1024:2048 ,'), [[1024, 2048]]);
});

test('a pair that is not N:K is refused, naming it', () => {
  for (const bad of ['5120', '5120:', 'a:b', '5120:17408:1', '-1:4']) {
    assert.throws(() => parseShapes(`1024:2048,${bad}`), new RegExp(`'${bad}' is not N:K`));
  }
});

test('the CLI refuses a bad --shapes with exit 2 and no stack trace, before any device starts', () => {
  const script = fileURLToPath(new URL('../../src/lab/bench-gemm.js', import.meta.url));
  const r = spawnSync(process.execPath, [script, '--shapes', '5120x17408'], { encoding: 'utf8' });
  assert.equal(r.status, 2, r.stderr);
  assert.match(r.stderr, /'5120x17408' is not N:K/);
  assert.doesNotMatch(r.stderr, /\n\s+at /);
});
