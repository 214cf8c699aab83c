// GGML dequantization (src/loader/gguf-quants.ts) on hand-built blocks of ggml-common.h's layouts, and round trips
// through the test quantizers (src/tools/gguf-write.ts) within each format's error bound.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { f32ToF16Bits } from '../../src/loader/dtype.js';
import { dequantize, GGML_TYPES, type GgmlTypeName } from '../../src/loader/gguf-quants.js';
import { seededRandom } from '../../src/model/random-weights.js';
import { quantize } from '../../src/tools/gguf-write.js';

const half = (x: number): [number, number] => { const b = f32ToF16Bits(x); return [b & 0xff, b >> 8]; };

test('Q8_0: d (f16) times each int8', () => {
  const block = new Uint8Array(34);
  block.set(half(0.5), 0);
  block[2] = 3; block[3] = 0xff; block[33] = 0x80; // 3, -1, ..., -128
  const y = dequantize('Q8_0', block, 32);
  assert.deepEqual([y[0], y[1], y[2], y[31]], [1.5, -0.5, 0, -64]);
});

test('Q4_0: low nibbles are values 0-15, high nibbles 16-31, each (q - 8) d', () => {
  const block = new Uint8Array(18);
  block.set(half(2), 0);
  block[2] = 0x9f; // value 0: 15 - 8 = 7; value 16: 9 - 8 = 1
  block[17] = 0x08; // value 15: 0; value 31: -8
  const y = dequantize('Q4_0', block, 32);
  assert.deepEqual([y[0], y[16], y[15], y[31], y[1]], [14, 2, 0, -16, -16]);
});

test('Q4_K: 6-bit scales and mins of get_scale_min_k4, d1 q - m1 per 32 values', () => {
  const b = new Uint8Array(144);
  b.set(half(0.25), 0); // d
  b.set(half(0.5), 2); // dmin
  // sub-block 0: scale 2, min 3; sub-block 5: scale 0x25 (low 4 bits 5 in byte 9, high 2 bits 2 in byte 1's top),
  // min 0x13 (low 4 bits 3 in byte 9's top, high bits 1 in byte 5's top)
  b[4] = 2; b[8] = 3;
  b[4 + 1] |= 2 << 6; b[4 + 9] = 0x5 | (0x3 << 4); b[4 + 5] |= 1 << 6;
  b[16] = 0x7 | (0x9 << 4); // value 0 (sub-block 0): 7; value 32 (sub-block 1): 9
  b[16 + 64 + 3] = 0xa0; // chunk 2, l = 3, high nibble: value 2*64 + 32 + 3 = 163 (sub-block 5): 10
  const y = dequantize('Q4_K', b, 256);
  assert.equal(y[0], 0.25 * 2 * 7 - 0.5 * 3);
  assert.equal(y[32], 0); // sub-block 1: scale 0, min 0
  assert.equal(y[163], 0.25 * 0x25 * 10 - 0.5 * 0x13);
});

test('Q5_K: the fifth bit of qh (bit 2c for the low half of chunk c, 2c + 1 for the high)', () => {
  const b = new Uint8Array(176);
  b.set(half(1), 0);
  b.set(half(0), 2);
  for (let j = 0; j < 4; j++) b[4 + j] = 1; // sub-blocks 0-3: scale 1
  b[48] = 0x21; // value 0: 1; value 32: 2
  b[16] = 0b0110; // qh[0]: bit 1 (value 32's 16) and bit 2 (chunk 1's low half: value 64's 16)
  const y = dequantize('Q5_K', b, 256);
  assert.deepEqual([y[0], y[32], y[64], y[96]], [1, 18, 16, 0]);
});

test('Q6_K: ql low/high nibbles, qh 2-bit pairs, int8 scales per 16 values, minus 32', () => {
  const b = new Uint8Array(210);
  b.set(half(0.5), 208);
  b[192] = 2; b[192 + 2] = 0xfe; b[192 + 4] = 1; b[192 + 6] = 3; // scales of values 0, 32, 64, 96: 2, -2, 1, 3
  b[0] = 0x1f; // value 0 low bits 15, value 64 low bits 1
  b[32] = 0x02; // value 32 low bits 2, value 96 low bits 0
  b[128] = 0b11_10_01_10; // high bits: value 0: 2, value 32: 1, value 64: 2, value 96: 3
  const y = dequantize('Q6_K', b, 256);
  assert.deepEqual([y[0], y[32], y[64], y[96], y[1]],
    [0.5 * 2 * (15 + 32 - 32), 0.5 * -2 * (2 + 16 - 32), 0.5 * 1 * (1 + 32 - 32), 0.5 * 3 * (0 + 48 - 32), 0.5 * 2 * -32]);
});

test('F16 and BF16 widen exactly; F32 copies', () => {
  assert.deepEqual([...dequantize('F16', new Uint8Array([0x00, 0x3c, 0x00, 0xc0]), 2)], [1, -2]);
  assert.deepEqual([...dequantize('BF16', new Uint8Array([0x80, 0x3f, 0x40, 0xc0]), 2)], [1, -3]);
  assert.deepEqual([...dequantize('F32', new Uint8Array(new Float32Array([0.1, 7]).buffer), 2)], [Math.fround(0.1), 7]);
});

// the worst error each format allows, as a fraction of its block's largest magnitude (see gguf-write.ts's scales)
const BOUNDS: [GgmlTypeName, number][] = [['Q8_0', 0.0041], ['Q4_0', 0.126], ['Q4_K', 0.07], ['Q5_K', 0.035], ['Q6_K', 0.0166],
  ['F16', 0.001], ['BF16', 0.004]];

for (const [type, bound] of BOUNDS) {
  test(`${type}: quantized random weights dequantize within ${bound} of each block's largest value`, () => {
    const rand = seededRandom(11);
    const n = 256 * 8;
    const x = new Float32Array(n).map((_, i) => (rand() - 0.5) * (i < 256 ? 1e-3 : i < 512 ? 0 : 2) + (i >= 1024 && i < 1280 ? 0.7 : 0));
    const q = quantize(type, x);
    assert.equal(q.length, (n / GGML_TYPES[type].blockElems) * GGML_TYPES[type].blockBytes);
    const y = dequantize(type, q, n);
    const block = GGML_TYPES[type].blockElems === 1 ? 256 : GGML_TYPES[type].blockElems;
    let worst = 0;
    for (let b = 0; b < n / block; b++) {
      const xs = x.subarray(b * block, (b + 1) * block);
      const amax = Math.max(...xs.map(Math.abs));
      for (let i = 0; i < block; i++) {
        const err = Math.abs(y[b * block + i]! - xs[i]!);
        assert.ok(err <= bound * amax + 1e-7, `${type} block ${b} value ${i}: ${y[b * block + i]} for ${xs[i]} (amax ${amax})`);
        if (amax > 0) worst = Math.max(worst, err / amax);
      }
    }
    assert.ok(worst > 0 || type === 'F16', `${type} shows some error`);
  });
}
