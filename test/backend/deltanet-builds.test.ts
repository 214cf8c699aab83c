// Which builds of the DeltaNet rule a CUDA step launches (backend/cuda/deltanet.ts ruleBuilds): the wide build for
// sequences of 1 to QUIRE_DELTANET_WIDE_MAX_TOKENS tokens, deltanet_recurrent for longer ones, both in a mixed step,
// neither for empty rows. (The two launches' bits: test/gpu/deltanet.test.ts.)

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ruleBuilds } from '../../src/backend/cuda/deltanet.js';

const starts = (lens: number[]) => Int32Array.from([0, ...lens.map((_, i) => lens.slice(0, i + 1).reduce((a, b) => a + b))]);

test('decode rows take the wide build alone, prompt chunks deltanet_recurrent alone, a mixed step both', () => {
  assert.deepEqual(ruleBuilds(starts([1, 1, 1]), 3, 1), { wide: true, recurrent: false });
  assert.deepEqual(ruleBuilds(starts([5, 3]), 2, 1), { wide: false, recurrent: true });
  assert.deepEqual(ruleBuilds(starts([1, 4, 1]), 3, 1), { wide: true, recurrent: true });
});

test('0 keeps every sequence on deltanet_recurrent; a larger bound moves chunks up to it to the wide build', () => {
  assert.deepEqual(ruleBuilds(starts([1, 1]), 2, 0), { wide: false, recurrent: true });
  assert.deepEqual(ruleBuilds(starts([1, 4, 6]), 3, 4), { wide: true, recurrent: true });
  assert.deepEqual(ruleBuilds(starts([1, 4, 6]), 3, 2 ** 30), { wide: true, recurrent: false });
});

test('empty rows launch nothing', () => {
  assert.deepEqual(ruleBuilds(starts([0, 0]), 2, 1), { wide: false, recurrent: false });
  assert.deepEqual(ruleBuilds(starts([0, 3]), 2, 1), { wide: false, recurrent: true });
});
