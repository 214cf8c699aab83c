import assert from 'node:assert/strict';
import { test } from 'node:test';
import { rerunWith } from './rerun-with.js';

const child = process.env.QUIRE_RERUN_PROBE;

test('rerunWith: the child sees the added env and its TAP output comes back', { skip: child ? 'this is the child' : false },
  () => {
    const out = rerunWith(import.meta.url, { QUIRE_RERUN_PROBE: 'x7' }, 'probe');
    assert.match(out, /probe saw x7/);
    assert.match(out, /# pass 1/);
  });

test('probe (the child run of the test above)', { skip: child ? false : 'only in the child run' }, (t) => {
  t.diagnostic(`probe saw ${child}`);
});
