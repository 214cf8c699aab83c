// Which builds of the DeltaNet rule a CUDA step launches (backend/cuda/deltanet.ts ruleBuilds): the wide build for
// sequences of 1 to QUIRE_DELTANET_WIDE_MAX_TOKENS tokens, the chunked one from QUIRE_DELTANET_CHUNKED_FROM tokens,
// deltanet_recurrent between, several in a mixed step, none for empty rows; the bounds each launch filters by; and
// the chunk sizes the rule takes.
// (The launches' outputs: test/gpu/deltanet.test.ts.)

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { chunkedFromFor, CudaDeltaNet, ruleBuilds } from '../../src/backend/cuda/deltanet.js';

const starts = (lens: number[]) => Int32Array.from([0, ...lens.map((_, i) => lens.slice(0, i + 1)
  .reduce((a, b) => a + b))]);
const flags = (b: ReturnType<typeof ruleBuilds>) => ({ wide: b.wide, recurrent: b.recurrent, chunked: b.chunked });

test('decode rows take the wide build alone, prompt chunks deltanet_recurrent alone, a mixed step both', () => {
  assert.deepEqual(flags(ruleBuilds(starts([1, 1, 1]), 3, 1)), { wide: true, recurrent: false, chunked: false });
  assert.deepEqual(flags(ruleBuilds(starts([5, 3]), 2, 1)), { wide: false, recurrent: true, chunked: false });
  assert.deepEqual(flags(ruleBuilds(starts([1, 4, 1]), 3, 1)), { wide: true, recurrent: true, chunked: false });
});

test('0 keeps every sequence on deltanet_recurrent; a larger bound moves chunks up to it to the wide build', () => {
  assert.deepEqual(flags(ruleBuilds(starts([1, 1]), 2, 0)), { wide: false, recurrent: true, chunked: false });
  assert.deepEqual(flags(ruleBuilds(starts([1, 4, 6]), 3, 4)), { wide: true, recurrent: true, chunked: false });
  assert.deepEqual(flags(ruleBuilds(starts([1, 4, 6]), 3, 2 ** 30)), { wide: true, recurrent: false, chunked: false });
});

test('empty rows launch nothing', () => {
  assert.deepEqual(flags(ruleBuilds(starts([0, 0]), 2, 1)), { wide: false, recurrent: false, chunked: false });
  assert.deepEqual(flags(ruleBuilds(starts([0, 3]), 2, 1)), { wide: false, recurrent: true, chunked: false });
});

test('from QUIRE_DELTANET_CHUNKED_FROM tokens a sequence takes the chunked build, which bounds the others below it',
  () => {
  assert.deepEqual(flags(ruleBuilds(starts([1, 40, 600]), 3, 1, 64)), { wide: true, recurrent: true, chunked: true });
  assert.deepEqual(flags(ruleBuilds(starts([64, 65]), 2, 1, 64)), { wide: false, recurrent: false, chunked: true });
  const b = ruleBuilds(starts([1, 4, 6]), 3, 2 ** 30, 5);
  assert.deepEqual(flags(b), { wide: true, recurrent: false, chunked: true }, 'the wide bound stops below it');
  assert.equal(b.wideMax, 4);
  assert.equal(b.chunkedFrom, 5);
  const off = ruleBuilds(starts([600]), 1, 1, 0);
  assert.deepEqual(flags(off), { wide: false, recurrent: true, chunked: false }, '0: never');
  assert.equal(off.chunkedFrom, 0x7fffffff, 'the kernels\' never');
});

test('a chunk size no kernel is built for is refused when the rule is set up, naming the sizes built', () => {
  // the constructor reads its options and knobs only: no device is touched
  const make = (chunk: number) => new CudaDeltaNet(null as never, null as never, { chunk });
  assert.throws(() => make(48), /chunks of 48 tokens \(32, 64 are built\)/);
  assert.doesNotThrow(() => make(32));
});

test('the chunked rule: from QUIRE_DELTANET_CHUNKED_FROM (64) by default or as asked, never in batch-invariant mode',
  () => {
    assert.equal(chunkedFromFor(false), 64);
    assert.equal(chunkedFromFor(false, 16), 16);
    assert.equal(chunkedFromFor(true), 0);
    assert.equal(chunkedFromFor(true, 16), 0);
  });
