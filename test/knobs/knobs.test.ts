// The knob registry: typed values, errors that name the variable, the start-up check, the generated table.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { checkKnobs, KnobError, KNOBS, knobsMarkdown, readKnob } from '../../src/knobs/knobs.js';

test('a knob reads its type, and its default where unset or empty', () => {
  assert.equal(readKnob('QUIRE_CHAIN_GEMM', {}), true);
  assert.equal(readKnob('QUIRE_CHAIN_GEMM', { QUIRE_CHAIN_GEMM: '' }), true);
  assert.equal(readKnob('QUIRE_CHAIN_GEMM', { QUIRE_CHAIN_GEMM: '0' }), false);
  assert.equal(readKnob('QUIRE_ALLOW_LONG_MAX_MODEL_LEN', { QUIRE_ALLOW_LONG_MAX_MODEL_LEN: 'true' }), true);
  assert.equal(readKnob('QUIRE_CHAIN_SPLIT_K', { QUIRE_CHAIN_SPLIT_K: 'Infinity' }), Infinity);
  assert.equal(readKnob('QUIRE_DECODE_SPLIT_TOKENS', { QUIRE_DECODE_SPLIT_TOKENS: '256' }), 256);
  assert.equal(readKnob('QUIRE_CHAIN_SILU', { QUIRE_CHAIN_SILU: '0' }), 'none', 'an alias');
  assert.equal(readKnob('QUIRE_API_KEY', {}), undefined);
});

test('a value that does not parse is an error naming the variable and the value, never the default', () => {
  assert.throws(() => readKnob('QUIRE_CHAIN_GEMM', { QUIRE_CHAIN_GEMM: 'yes' }),
    (e: unknown) => e instanceof KnobError && /^QUIRE_CHAIN_GEMM=yes: expected 0 or 1/.test((e as Error).message));
  assert.throws(() => readKnob('QUIRE_DECODE_SPLIT_TOKENS', { QUIRE_DECODE_SPLIT_TOKENS: '1k' }),
    /QUIRE_DECODE_SPLIT_TOKENS=1k: expected an integer >= 1/);
  assert.throws(() => readKnob('QUIRE_DECODE_SPLIT_TOKENS', { QUIRE_DECODE_SPLIT_TOKENS: '0' }), /expected an integer >= 1/);
  assert.throws(() => readKnob('QUIRE_CHAIN_WHOLE', { QUIRE_CHAIN_WHOLE: '2.5' }), /QUIRE_CHAIN_WHOLE=2.5/);
  assert.throws(() => readKnob('QUIRE_CHAIN_SILU', { QUIRE_CHAIN_SILU: 'tiles' }), /QUIRE_CHAIN_SILU=tiles: expected pairs or none/);
  assert.throws(() => readKnob('QUIRE_DECODE_GROUPS', { QUIRE_DECODE_GROUPS: '8;4' }), /comma-separated/);
  assert.throws(() => readKnob('QUIRE_API_KEY', { QUIRE_API_KEY: '' }), /QUIRE_API_KEY is set but empty/,
    'an empty key would turn auth off');
});

test('checkKnobs reports bad values as errors and unknown QUIRE_ names as warnings', () => {
  const { errors, warnings } = checkKnobs({ QUIRE_CHAIN_NORM: '2', QUIRE_CHAIN_GEMMS: '0', QUIRE_PDL: '0', PATH: '/bin' });
  assert.deepEqual(errors.map((e) => e.split(':')[0]), ['QUIRE_CHAIN_NORM=2']);
  assert.equal(warnings.length, 1);
  assert.match(warnings[0]!, /QUIRE_CHAIN_GEMMS is set but is no Quire variable/);
});

test('the CLI stops at start-up on a bad value with one line naming it, before any module reads it', () => {
  const r = spawnSync(process.execPath, ['dist/src/cli/main.js', '--help'],
    { env: { ...process.env, QUIRE_DECODE_SPLIT_TOKENS: 'lots' }, encoding: 'utf8' });
  assert.equal(r.status, 2);
  assert.equal(r.stderr.trim().split('\n').length, 1, r.stderr);
  assert.match(r.stderr, /^quire: QUIRE_DECODE_SPLIT_TOKENS=lots: expected an integer >= 1/);
  const ok = spawnSync(process.execPath, ['dist/src/cli/main.js', '--help'], { env: { ...process.env }, encoding: 'utf8' });
  assert.equal(ok.status, 0, ok.stderr);
});

test('docs/knobs.md is the table generated from the registry, and every knob has a doc line', () => {
  assert.equal(readFileSync('docs/knobs.md', 'utf8'), knobsMarkdown(), 'regenerate: node dist/src/knobs/knobs.js > docs/knobs.md');
  for (const [name, k] of Object.entries(KNOBS)) assert.ok(k.doc.length > 10, name);
});
