// FP8 E4M3 rounding (the KV cache's --kv-cache-dtype fp8), against the format's 256 codes.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { E4M3_MAX, e4m3Bits, e4m3Value, roundE4m3 } from '../../src/loader/fp8.js';

const values = Array.from({ length: 256 }, (_, b) => e4m3Value(b)).filter((v) => !Number.isNaN(v));
const positives = [...new Set(values.filter((v) => v >= 0))].sort((a, b) => a - b);

test('the format: 2 NaN codes, the largest finite 448, the smallest subnormal 2^-9', () => {
  assert.equal(Array.from({ length: 256 }, (_, b) => e4m3Value(b)).filter(Number.isNaN).length, 2);
  assert.equal(positives.at(-1), E4M3_MAX);
  assert.equal(positives[1], 2 ** -9);
  assert.equal(positives.length, 127, '0 and 126 positive values');
});

test('every e4m3 value rounds to itself; midpoints go to the even neighbour; past 448 saturates', () => {
  for (const v of values) assert.equal(roundE4m3(v), v);
  for (let i = 0; i + 1 < positives.length; i++) {
    const [a, b] = [positives[i]!, positives[i + 1]!];
    const even = i % 2 === 0 ? a : b;  // codes alternate even / odd mantissas: 0 is even
    assert.equal(roundE4m3((a + b) / 2), even, `midpoint of ${a} and ${b}`);
    assert.equal(roundE4m3(-(a + b) / 2), -even);
  }
  assert.equal(roundE4m3(1000), 448);
  assert.equal(roundE4m3(-460), -448);
  assert.ok(Number.isNaN(roundE4m3(NaN)));
});

test('property: the result is the nearest e4m3 value', () => {
  fc.assert(fc.property(fc.double({ min: -500, max: 500, noNaN: true }), (x) => {
    const r = roundE4m3(x);
    const best = Math.min(...values.map((v) => Math.abs(v - Math.max(-448, Math.min(448, x)))));
    return Math.abs(r - Math.max(-448, Math.min(448, x))) === best && values.includes(r);
  }), { numRuns: 2000 });
});

test('e4m3Bits encodes: every non-NaN code back to itself, NaN to 0x7f, values that are not e4m3 refused', () => {
  for (let b = 0; b < 256; b++) {
    if (Number.isNaN(e4m3Value(b))) assert.ok(b === 0x7f || b === 0xff);
    else assert.equal(e4m3Bits(e4m3Value(b)), b, `code 0x${b.toString(16)}`);
  }
  assert.equal(e4m3Bits(NaN), 0x7f);
  assert.equal(e4m3Bits(-0), 0x80);
  assert.equal(e4m3Bits(E4M3_MAX), 0x7e);
  for (const x of [0.3, 464, 2 ** -10, Infinity]) assert.throws(() => e4m3Bits(x), /not an e4m3 value/, String(x));
});

test('property: e4m3Bits(roundE4m3(x)) is the code of the rounded value', () => {
  fc.assert(fc.property(fc.double({ min: -1000, max: 1000, noNaN: true }), (x) =>
    e4m3Value(e4m3Bits(roundE4m3(x))) === roundE4m3(x)), { numRuns: 5000 });
});
