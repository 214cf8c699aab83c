import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { e4m3Value, roundE4m3 } from '../../src/loader/fp8.js';
import {
  bf16BitsToF32,
  bf16ToF32,
  bytesToF32,
  e4m3ToF32,
  f16BitsToF32,
  f16ToF32,
  f32ToBf16,
  f32ToBf16Bits,
  f32ToBytes,
  f32ToE4m3,
  f32ToF16,
  f32ToF16Bits,
} from '../../src/loader/dtype.js';

function fromBits(bits: number): number {
  return new Float32Array(new Uint32Array([bits >>> 0]).buffer)[0]!;
}

test('bf16: exact values, ties to even, zeros, infinities, NaN, overflow', () => {
  assert.equal(f32ToBf16Bits(1), 0x3f80);
  assert.equal(f32ToBf16Bits(-2), 0xc000);
  assert.equal(f32ToBf16Bits(fromBits(0x3f808000)), 0x3f80, 'halfway, even below: down');
  assert.equal(f32ToBf16Bits(fromBits(0x3f818000)), 0x3f82, 'halfway, odd below: up');
  assert.equal(f32ToBf16Bits(fromBits(0x3f808001)), 0x3f81, 'above halfway: up');
  assert.equal(f32ToBf16Bits(fromBits(0x3f807fff)), 0x3f80, 'below halfway: down');
  assert.equal(f32ToBf16Bits(0), 0x0000);
  assert.equal(f32ToBf16Bits(-0), 0x8000);
  assert.equal(f32ToBf16Bits(Infinity), 0x7f80);
  assert.equal(f32ToBf16Bits(-Infinity), 0xff80);
  assert.equal(f32ToBf16Bits(fromBits(0x7f7fffff)), 0x7f80, 'largest f32 rounds to inf');
  const nan = f32ToBf16Bits(NaN);
  assert.equal(nan & 0x7f80, 0x7f80);
  assert.notEqual(nan & 0x007f, 0);
  assert.ok(Number.isNaN(f32ToBf16Bits(fromBits(0x7f800001)) && bf16BitsToF32(f32ToBf16Bits(fromBits(0x7f800001)))), 'signalling NaN stays NaN');
  assert.ok(Object.is(bf16BitsToF32(0x8000), -0));
});

test('bf16: every bit pattern round-trips through f32', () => {
  const all = new Uint16Array(65536).map((_, i) => i);
  const back = f32ToBf16(bf16ToF32(all));
  for (let i = 0; i < 65536; i++) {
    if (Number.isNaN(bf16BitsToF32(i))) assert.ok(Number.isNaN(bf16BitsToF32(back[i]!)), `NaN ${i}`);
    else assert.equal(back[i], i);
  }
});

test('bf16 and f16: the result is the nearest representable value, ties to even', () => {
  const check = (toBits: (x: number) => number, fromBitsFn: (h: number) => number, x: number) => {
    const h = toBits(x);
    const r = fromBitsFn(h);
    if (!Number.isFinite(r)) return;
    for (const neighbour of [h - 1, h + 1]) {
      const n = fromBitsFn(neighbour & 0xffff);
      if (!Number.isFinite(n) || (neighbour & 0x8000) !== (h & 0x8000)) continue;
      const dr = Math.abs(x - r);
      const dn = Math.abs(x - n);
      assert.ok(dr < dn || (dr === dn && (h & 1) === 0), `x=${x} got ${r} but ${n} is as near`);
    }
  };
  fc.assert(
    fc.property(fc.integer({ min: 0, max: 0xffffffff }), (bits) => {
      const x = fromBits(bits);
      if (Number.isNaN(x)) return;
      check(f32ToBf16Bits, bf16BitsToF32, x);
    }),
    { numRuns: 3000 },
  );
  fc.assert(
    fc.property(fc.float({ min: -70000, max: 70000, noNaN: true }), (x) => check(f32ToF16Bits, f16BitsToF32, Math.fround(x))),
    { numRuns: 3000 },
  );
});

test('f16: exact values, ties to even, subnormals, overflow, zeros, infinities, NaN', () => {
  assert.equal(f32ToF16Bits(1), 0x3c00);
  assert.equal(f32ToF16Bits(-2), 0xc000);
  assert.equal(f32ToF16Bits(65504), 0x7bff);
  assert.equal(f32ToF16Bits(65519), 0x7bff);
  assert.equal(f32ToF16Bits(65520), 0x7c00, 'halfway to 65536 rounds to even: inf');
  assert.equal(f32ToF16Bits(1 + 2 ** -11), 0x3c00, 'halfway, even below: down');
  assert.equal(f32ToF16Bits(1 + 3 * 2 ** -11), 0x3c02, 'halfway, odd below: up');
  assert.equal(f32ToF16Bits(2 ** -24), 0x0001);
  assert.equal(f32ToF16Bits(2 ** -25), 0x0000, 'half the smallest subnormal ties to zero');
  assert.equal(f32ToF16Bits(3 * 2 ** -25), 0x0002, 'subnormal tie to even');
  assert.equal(f32ToF16Bits(2 ** -14 - 2 ** -25), 0x0400, 'largest subnormal rounds up to smallest normal');
  assert.equal(f32ToF16Bits(1e-10), 0x0000);
  assert.equal(f32ToF16Bits(-0), 0x8000);
  assert.equal(f32ToF16Bits(Infinity), 0x7c00);
  assert.equal(f32ToF16Bits(-Infinity), 0xfc00);
  const nan = f32ToF16Bits(NaN);
  assert.equal(nan & 0x7c00, 0x7c00);
  assert.notEqual(nan & 0x03ff, 0);
  assert.equal(f16BitsToF32(0x0001), 2 ** -24);
  assert.equal(f16BitsToF32(0xfc00), -Infinity);
  assert.ok(Number.isNaN(f16BitsToF32(0x7e00)));
  assert.ok(Object.is(f16BitsToF32(0x8000), -0));
});

test('f16: every bit pattern round-trips through f32', () => {
  const all = new Uint16Array(65536).map((_, i) => i);
  const back = f32ToF16(f16ToF32(all));
  for (let i = 0; i < 65536; i++) {
    if (Number.isNaN(f16BitsToF32(i))) assert.ok(Number.isNaN(f16BitsToF32(back[i]!)), `NaN ${i}`);
    else assert.equal(back[i], i, `bits ${i.toString(16)}`);
  }
});

test('bytes <-> f32 for every dtype, including unaligned views', () => {
  const values = new Float32Array([1.5, -0.25, 3, 1024, -49152, 0.5]);
  for (const dtype of ['bf16', 'f16', 'f32'] as const) {
    const bytes = f32ToBytes(dtype, values);
    const padded = new Uint8Array(bytes.byteLength + 1);
    padded.set(bytes, 1);
    assert.deepEqual(bytesToF32(dtype, padded.subarray(1)), values, dtype);
  }
});

test('f8_e4m3: every code to its value (NaN codes to NaN) and back; f32 rounded to nearest even, saturated', () => {
  const codes = Uint8Array.from({ length: 256 }, (_, i) => i);
  const values = bytesToF32('f8_e4m3', codes);
  assert.deepEqual(values, e4m3ToF32(codes));
  assert.deepEqual(bytesToF32('f8_e4m3', Uint8Array.from([0, ...codes]).subarray(1)), values, 'an unaligned view');
  const back = f32ToBytes('f8_e4m3', values);
  for (let b = 0; b < 256; b++) {
    if (b === 0x7f || b === 0xff) assert.ok(Number.isNaN(values[b]!) && (back[b]! & 0x7f) === 0x7f, `NaN code ${b}`);
    else assert.equal(back[b], b, `code ${b}`);
  }
  const x = new Float32Array([0.3, -1000, 1 + 1 / 16, 1 + 3 / 16, 2 ** -10, -0, 448]);
  assert.deepEqual(bytesToF32('f8_e4m3', f32ToE4m3(x)), Float32Array.from(x, roundE4m3));
  assert.deepEqual([...f32ToE4m3(x)].slice(1, 5), [0xfe, 0x38, 0x3a, 0x00], 'saturated; ties to the even mantissa');
  assert.equal(e4m3Value(f32ToE4m3(new Float32Array([0.3]))[0]!), 0.3125);
});
