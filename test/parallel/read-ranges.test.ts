// sharded-source.ts readRanges: a shard's byte ranges read through as few calls as nearby ranges allow (a column
// split's one range a row joined into spans), with the same bytes as one read a range.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readRanges } from '../../src/parallel/sharded-source.js';
import { byteRanges, columnParallel, rowParallel } from '../../src/parallel/sharding.js';

function source(bytes: number): { file: Uint8Array; calls: number[]; read: (offset: number, dest: Uint8Array) => void } {
  const file = Uint8Array.from({ length: bytes }, (_, i) => (i * 131 + 7) & 255);
  const calls: number[] = [];
  return { file, calls, read: (offset, dest) => { calls.push(dest.byteLength); dest.set(file.subarray(offset, offset + dest.byteLength)); } };
}

function oneByOne(file: Uint8Array, ranges: { offset: number; bytes: number }[]): Uint8Array {
  const out = new Uint8Array(ranges.reduce((a, r) => a + r.bytes, 0));
  let at = 0;
  for (const r of ranges) {
    out.set(file.subarray(r.offset, r.offset + r.bytes), at);
    at += r.bytes;
  }
  return out;
}

test('a -tp 2 column split of [2048, 384] bf16 (one range a row) reads in one call, the same bytes', () => {
  // rowParallel splits the input columns (down_proj's I): 2048 ranges of 384 bytes (192 columns), 768 apart
  const ranges = byteRanges(rowParallel(2048, 384, 1, 2), 2);
  assert.equal(ranges.length, 2048);
  const src = source(2048 * 384 * 2);
  const out = new Uint8Array(ranges.reduce((a, r) => a + r.bytes, 0));
  readRanges(ranges, src.read, out);
  assert.deepEqual(out, oneByOne(src.file, ranges));
  assert.deepEqual(src.calls, [2048 * 384 * 2 - 384]);
});

test('-tp 4 column splits read in spans; a row split is one read; ranges far apart, or large, stay apart', () => {
  const ranges = byteRanges(rowParallel(4096, 1024, 2, 4), 2);
  const src = source(4096 * 1024 * 2);
  const out = new Uint8Array(ranges.reduce((a, r) => a + r.bytes, 0));
  readRanges(ranges, src.read, out);
  assert.deepEqual(out, oneByOne(src.file, ranges));
  assert.ok(src.calls.length < ranges.length / 8, `${src.calls.length} calls for ${ranges.length} ranges`);
  // every gap joined is under 64 KiB: at most 3 of 4 rows' bytes beside each one wanted
  assert.ok(src.calls.reduce((a, b) => a + b, 0) <= 4 * out.length);
  const rows = byteRanges(columnParallel(4096, 1024, 1, 4), 2);
  const src2 = source(4096 * 1024 * 2);
  readRanges(rows, src2.read, new Uint8Array(1024 * 1024 * 2));
  assert.equal(src2.calls.length, 1);
  const far = [{ offset: 0, bytes: 16 }, { offset: 1 << 20, bytes: 16 }];
  const src3 = source((1 << 20) + 16);
  const out3 = new Uint8Array(32);
  readRanges(far, src3.read, out3);
  assert.deepEqual(src3.calls, [16, 16]);
  assert.deepEqual(out3, oneByOne(src3.file, far));
  // two whole slabs of 64 KiB side by side (an expert-parallel rank's experts): one read each
  const slabs = [{ offset: 0, bytes: 1 << 16 }, { offset: 2 << 16, bytes: 1 << 16 }];
  const src4 = source(3 << 16);
  readRanges(slabs, src4.read, new Uint8Array(2 << 16));
  assert.deepEqual(src4.calls, [1 << 16, 1 << 16]);
});
