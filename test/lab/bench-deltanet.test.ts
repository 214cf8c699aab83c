// bench-deltanet's names and arithmetic (src/lab/bench-deltanet.ts): each --variants name sets the backend switch it
// says, a step's sequences are laid out as --seqs, --tokens and --chunk say, the state bytes a step moves are
// S x Hv x Dk x Dv read and written at the state's width, and the CLI refuses an unknown build, state dtype or count
// naming it, before any device starts. (The timing itself runs on the GPU host.)

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { benchSequences, checkVariants, countOption, DELTANET_VARIANTS, stateBytesPerStep }
  from '../../src/lab/bench-deltanet.js';
import { buildForwardBatch } from '../../src/engine/batch-builder.js';

test('--variants: each name sets its switch; an unknown one is refused naming the known ones', () => {
  assert.deepEqual(DELTANET_VARIANTS['default'], {});
  // each build but 'chunked*' with the chunked rule off (on by default from 64 tokens), 'wide' with two launches
  assert.deepEqual(DELTANET_VARIANTS['recurrent'], { deltanetWideMaxTokens: 0, deltanetChunkedFrom: 0 });
  assert.deepEqual(DELTANET_VARIANTS['wide'], { deltanetWideMaxTokens: 1, deltanetChunkedFrom: 0,
    deltanetOneLaunch: false });
  assert.deepEqual(DELTANET_VARIANTS['wide-chunks'], { deltanetWideMaxTokens: 2 ** 30, deltanetChunkedFrom: 0 });
  assert.deepEqual(DELTANET_VARIANTS['one-launch'], { deltanetWideMaxTokens: 1, deltanetOneLaunch: true,
    deltanetChunkedFrom: 0 });
  assert.deepEqual(DELTANET_VARIANTS['chunked'], { deltanetChunkedFrom: 2, deltanetChunk: 64 });
  assert.deepEqual(DELTANET_VARIANTS['chunked32'], { deltanetChunkedFrom: 2, deltanetChunk: 32 });
  assert.deepEqual(DELTANET_VARIANTS['chunked-mma'], { deltanetChunkedFrom: 2, deltanetChunk: 64,
    deltanetChunkedMma: true });
  assert.deepEqual(DELTANET_VARIANTS['chunked32-mma'], { deltanetChunkedFrom: 2, deltanetChunk: 32,
    deltanetChunkedMma: true });
  assert.deepEqual(DELTANET_VARIANTS['fused-norm'], { deltanetFusedNorm: true });
  assert.deepEqual(DELTANET_VARIANTS['fused-decode'], { deltanetFusedDecode: true });
  const known = 'default, recurrent, wide, wide-chunks, one-launch, chunked, chunked32, chunked-mma, '
    + 'chunked32-mma, fused-norm, fused-decode';
  assert.throws(() => checkVariants(['default', 'narrow']),
    { message: `bench-deltanet: --variants: unknown build 'narrow' (${known})` });
});

test('a step\'s sequences: S rows of --tokens at 512 in slots 0..S-1, then the --chunk from 0 in slot S, each '
  + 'row\'s pages covering it', () => {
  const seqs = benchSequences(3, 2, 40);
  assert.deepEqual(seqs.map((q) => [q.tokenIds.length, q.startPosition, q.stateSlot, q.blockTable.length]),
    [[2, 512, 0, 33], [2, 512, 1, 33], [2, 512, 2, 33], [40, 0, 3, 3]]);
  assert.equal(benchSequences(4, 1, 0).length, 4, 'no chunk for 0');
  const batch = buildForwardBatch(benchSequences(2, 16, 0), 16);
  assert.equal(batch.numTokens, 32);
  assert.equal(batch.seqLens[1], 528);
});

test('--tokens and --chunk take whole numbers from their least, else an error naming the flag', () => {
  assert.equal(countOption('--chunk', '0', 0), 0);
  assert.equal(countOption('--tokens', '8', 1), 8);
  assert.throws(() => countOption('--tokens', '0', 1), /--tokens: '0' \(a whole number >= 1\)/);
  assert.throws(() => countOption('--chunk', '2.5', 0), /--chunk: '2.5'/);
});

test('state bytes a step: read and written, 4 bytes an element for f32 states, 2 for bf16', () => {
  const shape = { numKeyHeads: 16, numValueHeads: 48, keyDim: 128, valueDim: 128, convKernel: 4 };
  assert.equal(stateBytesPerStep(shape, 160, 'f32'), 2 * 160 * 48 * 128 * 128 * 4);
  assert.equal(stateBytesPerStep(shape, 160, 'bf16'), stateBytesPerStep(shape, 160, 'f32') / 2);
});

test('the CLI refuses an unknown build or state dtype with exit 2 and no stack trace', () => {
  const script = fileURLToPath(new URL('../../src/lab/bench-deltanet.js', import.meta.url));
  for (const [args, message] of [[['--variants', 'narrow'], /unknown build 'narrow'/],
    [['--ssm', 'f16'], /--ssm: 'f16' \(f32, bf16\)/], [['--tokens', '0'], /--tokens: '0'/],
    [['--seqs', '1,x'], /--seqs: 'x'/]] as const) {
    const r = spawnSync(process.execPath, [script, ...args], { encoding: 'utf8' });
    assert.equal(r.status, 2, r.stderr);
    assert.match(r.stderr, message);
    assert.doesNotMatch(r.stderr, /\n\s+at /);
  }
});
