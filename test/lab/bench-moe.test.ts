// bench-moe's --variants names (src/lab/bench-moe.ts): default, every gemm_rows variant once, wgmma; each maps to
// what it sets on CudaMoe, and an unknown one is refused naming the known ones, as wgmma with --fp8, before any
// device starts. (The timing itself: test/gpu/moe and moe-fp8.)

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { GEMM_ROWS_VARIANTS } from '../../src/backend/cuda/gemm-rows.js';
import { e4m3Pool, moePath, moeVariantName, moeVariantNames } from '../../src/lab/bench-moe.js';
import { e4m3Value } from '../../src/loader/fp8.js';

test('--variants names default, each gemm_rows variant once, and wgmma', () => {
  const names = moeVariantNames();
  assert.equal(names[0], 'default');
  assert.equal(names.at(-1), 'wgmma');
  assert.equal(new Set(names).size, GEMM_ROWS_VARIANTS.length + 2);
  assert.deepEqual(names.slice(1, 4), ['split_n1', 'split_n2', 'split_n4']);
});

test('--fp8 draws its weights from e4m3 codes of +-224, spread over the range (not only a few codes)', () => {
  const values = Array.from(e4m3Pool(7), e4m3Value);
  assert.ok(values.every((v) => Number.isFinite(v) && Math.abs(v) <= 224), 'every code an e4m3 value within +-224');
  assert.ok(new Set(values).size > 100, `${new Set(values).size} distinct values`);
  assert.ok(Math.min(...values) < -150 && Math.max(...values) > 150, 'both ends of the range');
  assert.deepEqual(e4m3Pool(7), e4m3Pool(7), 'seeded');
});

test('each name sets the variant and the wgmma threshold it says', () => {
  assert.deepEqual(moePath('default', 32), { variant: undefined, wgmmaMinRows: 32 });
  assert.deepEqual(moePath('wgmma', 32), { variant: undefined, wgmmaMinRows: 1 });
  for (const v of GEMM_ROWS_VARIANTS) {
    assert.deepEqual(moePath(moeVariantName(v), 32), { variant: v, wgmmaMinRows: 0 }, moeVariantName(v));
  }
  assert.throws(() => moePath('split_n3', 32), /unknown path 'split_n3' \(default, split_n1, .*, wgmma\)/);
});

test('the CLI refuses an unknown path, and wgmma with --fp8, naming it, before any device starts', () => {
  const script = fileURLToPath(new URL('../../src/lab/bench-moe.js', import.meta.url));
  for (const [args, message] of [[['--variants', 'split_n3'], /unknown path 'split_n3'/],
    [['--fp8', '--variants', 'default,wgmma'], /wgmma takes bf16 experts, not --fp8/]] as const) {
    const r = spawnSync(process.execPath, [script, ...args], { encoding: 'utf8' });
    assert.equal(r.status, 2, `${args.join(' ')}: ${r.stderr}`);
    assert.match(r.stderr, message);
    assert.doesNotMatch(r.stderr, /\n\s+at /, 'no stack trace');
  }
});
