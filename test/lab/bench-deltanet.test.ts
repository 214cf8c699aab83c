// bench-deltanet's names and arithmetic (src/lab/bench-deltanet.ts): each --variants name sets the backend switch it
// says, the state bytes a step moves are S x Hv x Dk x Dv read and written at the state's width, and the CLI refuses an
// unknown build or state dtype naming it, before any device starts. (The timing itself runs on the GPU host.)

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { checkVariants, DELTANET_VARIANTS, stateBytesPerStep } from '../../src/lab/bench-deltanet.js';

test('--variants: each name sets its switch; an unknown one is refused naming the known ones', () => {
  assert.deepEqual(DELTANET_VARIANTS['default'], {});
  assert.deepEqual(DELTANET_VARIANTS['wide'], { deltanetWide: true });
  assert.deepEqual(DELTANET_VARIANTS['fused-norm'], { deltanetFusedNorm: true });
  assert.deepEqual(DELTANET_VARIANTS['fused-decode'], { deltanetFusedDecode: true });
  assert.throws(() => checkVariants(['default', 'narrow']),
    /unknown build 'narrow' \(default, wide, fused-norm, fused-decode\)/);
});

test('state bytes a step: read and written, 4 bytes an element for f32 states, 2 for bf16', () => {
  const shape = { numKeyHeads: 16, numValueHeads: 48, keyDim: 128, valueDim: 128, convKernel: 4 };
  assert.equal(stateBytesPerStep(shape, 160, 'f32'), 2 * 160 * 48 * 128 * 128 * 4);
  assert.equal(stateBytesPerStep(shape, 160, 'bf16'), stateBytesPerStep(shape, 160, 'f32') / 2);
});

test('the CLI refuses an unknown build or state dtype with exit 2 and no stack trace', () => {
  const script = fileURLToPath(new URL('../../src/lab/bench-deltanet.js', import.meta.url));
  for (const [args, message] of [[['--variants', 'narrow'], /unknown build 'narrow'/],
    [['--ssm', 'f16'], /--ssm: 'f16' \(f32, bf16\)/]] as const) {
    const r = spawnSync(process.execPath, [script, ...args], { encoding: 'utf8' });
    assert.equal(r.status, 2, r.stderr);
    assert.match(r.stderr, message);
    assert.doesNotMatch(r.stderr, /\n\s+at /);
  }
});
