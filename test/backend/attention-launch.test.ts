// The decode kernel's build name (attention-launch.ts launchDecodeAttention), on a device that records launches:
// with decodeMma 'all' the _mma build of the step's G at any grid (no _w, _pre or _hg variant, no cluster), with
// 'groups' the _mma build at G 4 and up, and a cache the _mma builds do not
// take refused by name; without it the grid picks the variant as before.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { DECODE_MMA_MIN_GROUP, decodeSplitCap, launchDecodeAttention, type AttentionLaunch, type DecodeGrid,
  VERIFY_DECODE_MAX_TOKENS, verifyAsDecode } from '../../src/backend/cuda/attention-launch.js';
import { MAX_SPLITS } from '../../src/backend/cuda/decode-splits.js';
import type { Device, KernelArg } from '../../src/backend/cuda/device.js';
import { metaLayout } from '../../src/backend/cuda/step-meta.js';

interface Launch {
  name: string;
  grid: number[];
  block: number;
  clusterZ: number;
  args: KernelArg[];
}

function recorder(): { device: Device; launches: Launch[] } {
  const launches: Launch[] = [];
  const device = {
    numSMs: 132, arch: 90,
    launch: (_file: string, name: string, grid: number[], block: number, args: KernelArg[], _shared = 0,
      _dependent = false, clusterZ = 1) => launches.push({ name, grid, block, clusterZ, args }),
  } as unknown as Device;
  return { device, launches };
}

function launchOf(headDim: number, extra: Partial<AttentionLaunch>): AttentionLaunch {
  return { qkv: 1n, k: 2n, v: 3n, out: 4n, meta: 5n, layout: metaLayout(512, 512, 64), numHeads: 32, numKvHeads: 4,
    headDim, blockSize: 16, scale: 1, ...extra };
}

const grid = (G: number, rows: number, gridZ: number, maxSplits = MAX_SPLITS): DecodeGrid =>
  ({ G, rows, gridZ, maxSplits, partialOut: 6n, partialMl: 7n, rowCounters: 8n, dependent: true });

/** The kernel's maxSplits argument: the fourth after its one float (scale, then the three split sizes). */
const maxSplitsArg = (l: Launch) => (l.args[l.args.findIndex((a) => 'f32' in a) + 4] as { i32: number }).i32;

test('decodeMma launches the _mma build of the step\'s G at any grid; the plain kernel picks its variants', () => {
  const { device, launches } = recorder();
  // one row of 4 splits (a _pre grid), 256 rows at G 1 and 2 (_w grids), 256 rows at G 8
  const grids = [grid(1, 1, 4), grid(1, 256, 1), grid(2, 256, 1), grid(8, 256, 1)];
  for (const g of grids) launchDecodeAttention(device, launchOf(128, { decodeMma: 'all' }), g);
  assert.deepEqual(launches.map((l) => l.name), ['attention_decode_bf16_d128_g1_mma',
    'attention_decode_bf16_d128_g1_mma', 'attention_decode_bf16_d128_g2_mma', 'attention_decode_bf16_d128_g8_mma']);
  assert.deepEqual(launches.map((l) => l.clusterZ), [1, 1, 1, 1], 'no clusters');
  assert.deepEqual(launches.map((l) => l.grid), [[32, 1, 4], [32, 256, 1], [16, 256, 1], [4, 256, 1]]);
  launches.length = 0;
  for (const g of grids) launchDecodeAttention(device, launchOf(128, {}), g);
  assert.deepEqual(launches.map((l) => l.name), ['attention_decode_bf16_d128_g1_pre',
    'attention_decode_bf16_d128_g1_w', 'attention_decode_bf16_d128_g2_w', 'attention_decode_bf16_d128_g8']);
});

test('decodeMma groups takes the _mma build at G 4 and up, the plain kernel and its variants below', () => {
  const { device, launches } = recorder();
  const grids = [grid(1, 1, 4), grid(1, 256, 1), grid(2, 256, 1), grid(2, 1, 4), grid(4, 1, 4), grid(4, 256, 1),
    grid(8, 256, 1), grid(8, 1, 1)];
  for (const g of grids) launchDecodeAttention(device, launchOf(128, { decodeMma: 'groups' }), g);
  assert.deepEqual(launches.map((l) => l.name.replace('attention_decode_bf16_d128_', '')),
    ['g1_pre', 'g1_w', 'g2_w', 'g2', 'g4_mma', 'g4_mma', 'g8_mma', 'g8_mma']);
  assert.equal(DECODE_MMA_MIN_GROUP, 4);
  launches.length = 0;
  assert.throws(() => launchDecodeAttention(device, launchOf(128, { decodeMma: 'groups', kvKernels: 'bf16_fp8' }),
    grid(2, 8, 1)), /not bf16_fp8 of 128/);
});

test('decodeMma refuses a cache its builds do not take: FP8, or a head dim other than 64 and 128', () => {
  const { device, launches } = recorder();
  launchDecodeAttention(device, launchOf(64, { decodeMma: 'all' }), grid(4, 8, 1));
  assert.equal(launches[0]!.name, 'attention_decode_bf16_d64_g4_mma');
  assert.throws(() => launchDecodeAttention(device, launchOf(256, { decodeMma: 'all' }), grid(4, 8, 1)),
    /bf16 cache of head dim 64 or 128, not bf16 of 256/);
  assert.throws(() => launchDecodeAttention(device, launchOf(128, { decodeMma: 'all', kvKernels: 'bf16_fp8' }),
    grid(2, 8, 1)), /not bf16_fp8 of 128/);
});

test('the grid\'s split cap reaches the kernel; the CUDA-core kernel takes only MAX_SPLITS', () => {
  const { device, launches } = recorder();
  launchDecodeAttention(device, launchOf(128, { decodeMma: 'groups' }), grid(4, 1, 32, 32));
  launchDecodeAttention(device, launchOf(128, { decodeMma: 'groups' }), grid(1, 1, 16));
  assert.deepEqual(launches.map((l) => [l.name.replace('attention_decode_bf16_d128_', ''), maxSplitsArg(l)]),
    [['g4_mma', 32], ['g1', MAX_SPLITS]]);
  assert.throws(() => launchDecodeAttention(device, launchOf(128, { decodeMma: 'groups' }), grid(2, 1, 16, 32)),
    new RegExp(`splits a row ${MAX_SPLITS} times at most, not 32`));
  // decodeSplitCap: the _mma builds' cap where the grid takes them, and only for a grid of under one block a SM at
  // MAX_SPLITS (8 rows x 16 = 128 < 132; 9 x 16 = 144 not)
  assert.deepEqual([[4, 'groups'], [2, 'groups'], [1, 'all'], [8, 'off']].map(([G, m]) =>
    decodeSplitCap(G as number, m as 'off' | 'groups' | 'all', 8, 132, 32)), [32, MAX_SPLITS, 32, MAX_SPLITS]);
  assert.equal(decodeSplitCap(4, 'groups', 9, 132, 32), MAX_SPLITS);
  assert.equal(decodeSplitCap(4, 'groups', 9, 132, 8), 8, 'a cap under MAX_SPLITS holds at any size');
});

test('verifyAsDecode: a verify step of at most maxSeqs rows of at most 16 tokens each; never a plain step', () => {
  const step = (lens: number[], verify?: boolean) => ({ verify, numSeqs: lens.length,
    queryStartLoc: Int32Array.from([0, ...lens.map((_, i) => lens.slice(0, i + 1).reduce((a, b) => a + b, 0))]) });
  assert.equal(verifyAsDecode(step([6], true), 8), true);
  assert.equal(verifyAsDecode(step([6, 1, 3, VERIFY_DECODE_MAX_TOKENS], true), 8), true, 'rows of 1 to 16 tokens');
  assert.equal(verifyAsDecode(step([6], true), 0), false, 'maxSeqs 0: never');
  assert.equal(verifyAsDecode(step(new Array<number>(9).fill(6), true), 8), false, 'more rows than maxSeqs');
  assert.equal(verifyAsDecode(step([6, VERIFY_DECODE_MAX_TOKENS + 1], true), 8), false, 'a prompt chunk beside it');
  assert.equal(verifyAsDecode(step([6]), 8), false, 'not a verify step');
  assert.equal(verifyAsDecode(step([6], false), 8), false);
});
