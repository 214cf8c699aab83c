// Programmatic dependent launch: on sm_90 and later unless QUIRE_PDL=0 turns it off (for A/B runs).

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { pdlEnabled } from '../../src/backend/cuda/device.js';
import { decodeAsDependent } from '../../src/backend/cuda/attention-launch.js';

test('dependent launches on Hopper and later, off below sm_90 and with QUIRE_PDL=0', () => {
  assert.equal(pdlEnabled(90, true), true);
  assert.equal(pdlEnabled(100, true), true);
  assert.equal(pdlEnabled(89, true), false, 'Ada has no griddepcontrol');
  assert.equal(pdlEnabled(80, true), false);
  assert.equal(pdlEnabled(90, false), false);
});

test('the decode kernel is a dependent launch unless a batch-invariant step sends it rows of several tokens', () => {
  assert.equal(decodeAsDependent(false, false), true, 'a mixed step: its one-token rows only');
  assert.equal(decodeAsDependent(false, true), true);
  assert.equal(decodeAsDependent(true, true), true, 'batch-invariant decode: one-token rows');
  assert.equal(decodeAsDependent(true, false), false,
    'batch-invariant prompt chunks: their earlier tokens come from the kernel just before');
});
