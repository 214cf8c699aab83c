// The device layout of block-FP8 weights' scales (src/backend/cuda/fp8-layout.ts): the parts' scale rows in order,
// each padded to 16 bytes, as cuBLASLt's BLK128x128_32F scales and the chain kernel read them.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { fp8DeviceScales, fp8ScaleRowFloats } from '../../src/backend/cuda/fp8-layout.js';
import type { Fp8BlockPart } from '../../src/backend/backend.js';

function part(name: string, n: number, K: number, firstScale: number): Fp8BlockPart {
  const scales = Float32Array.from({ length: n / 128 * Math.ceil(K / 128) }, (_, i) => firstScale + i);
  return {
    weight: { name, dtype: 'f8_e4m3', shape: [n, K], data: new Uint8Array(n * K) },
    scaleInv: { name: `${name}_scale_inv`, dtype: 'f32', shape: [n / 128, K / 128], data: new Uint8Array(scales.buffer) },
  };
}

test('scale rows of K / 128 floats padded to a multiple of 4, the parts\' rows one after another', () => {
  assert.deepEqual([128, 384, 512, 4096, 12288].map(fp8ScaleRowFloats), [4, 4, 4, 32, 96]);
  const { N, K, scales } = fp8DeviceScales('qkv', [part('q', 256, 384, 10), part('k', 128, 384, 20)]);
  assert.deepEqual([N, K], [384, 384]);
  assert.deepEqual([...scales], [10, 11, 12, 0, 13, 14, 15, 0, 20, 21, 22, 0]);
});

test('a part that is not whole 128 x 128 blocks, or whose scales have another shape, is refused naming it', () => {
  assert.throws(() => fp8DeviceScales('o', [part('o', 128, 200, 1)]), /uploadFp8Block o: o f8_e4m3 \[128, 200\]/);
  const bad = part('k', 128, 256, 1);
  assert.throws(() => fp8DeviceScales('qkv', [part('q', 128, 256, 1), { ...bad, scaleInv: { ...bad.scaleInv, shape: [2, 1] } }]),
    /k f8_e4m3 \[128, 256\] with scales f32 \[2, 1\]/);
  assert.throws(() => fp8DeviceScales('qkv', [part('q', 128, 256, 1), part('v', 128, 384, 1)]), /v f8_e4m3 \[128, 384\]/);
});
