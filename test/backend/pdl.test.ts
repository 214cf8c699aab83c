// Programmatic dependent launch: on sm_90 and later unless QUIRE_PDL=0 turns it off (for A/B runs).

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { pdlEnabled } from '../../src/backend/cuda/device.js';

test('dependent launches on Hopper and later, off below sm_90 and with QUIRE_PDL=0', () => {
  assert.equal(pdlEnabled(90, undefined), true);
  assert.equal(pdlEnabled(100, '1'), true);
  assert.equal(pdlEnabled(89, undefined), false, 'Ada has no griddepcontrol');
  assert.equal(pdlEnabled(80, '1'), false);
  assert.equal(pdlEnabled(90, '0'), false);
});
