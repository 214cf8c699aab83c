import assert from 'node:assert/strict';
import { test } from 'node:test';
import { rerunWith } from './rerun-with.js';

const child = process.env.QUIRE_RERUN_PROBE;

if (child) {
  // only in the child run of the test below: the parent reads this diagnostic from the child's stdout
  test('probe', (t) => t.diagnostic(`probe saw ${child}`));
} else {
  test('rerunWith: the child sees the added env and its TAP output comes back', () => {
    const out = rerunWith(import.meta.url, { QUIRE_RERUN_PROBE: 'x7' }, 'probe');
    assert.match(out, /probe saw x7/);
    assert.match(out, /# pass 1/);
  });
}
