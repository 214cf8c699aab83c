// The host-side pieces of the CUDA backend, which need no GPU: step metadata
// packing, the device workspace's bump allocation, the profile table, and
// library discovery's error.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { layoutFor, packStep, META_BLOCK_TABLE_STRIDE, META_NUM_SEQS, META_NUM_TOKENS,
  packRowOrder, packTiles, PREFILL_TILE_ROWS } from '../../src/backend/cuda/step-meta.js';
import { DeviceWorkspace, StepWorkspace } from '../../src/backend/cuda/workspace.js';
import { profileTable, formatProfile } from '../../src/backend/cuda/profiler.js';
import { libraryCandidates, loadLibrary, LibraryNotFoundError } from '../../src/backend/cuda/ffi/discover.js';
import { bf16BytesToF32 } from '../../src/backend/cuda/host-staging.js';
import { f32ToBf16 } from '../../src/loader/dtype.js';
import { batchOf } from '../backend/helpers.js';

test('packStep puts every section at its layout offset and the counts in the header', () => {
  const batch = batchOf([{ ids: [1, 2, 3], start: 30, pages: [4, 9, 2] }, { ids: [7], start: 5, pages: [6] },
    { ids: Array.from({ length: 20 }, (_, i) => i), start: 0, pages: [3, 8] }], 16, [2, 3, 23]);
  const layout = layoutFor(batch, null);
  const words = new Int32Array(layout.totalWords).fill(-7);
  const packed = packStep(batch, layout, words);
  assert.equal(words[META_NUM_TOKENS], 24);
  assert.equal(words[META_NUM_SEQS], 3);
  assert.equal(words[META_BLOCK_TABLE_STRIDE], layout.blockTableStride);
  assert.deepEqual([...words.subarray(layout.inputIds, layout.inputIds + 24)], [...batch.inputIds]);
  assert.deepEqual([...words.subarray(layout.positions, layout.positions + 24)], [...batch.positions]);
  assert.deepEqual([...words.subarray(layout.slotMapping, layout.slotMapping + 24)], [...batch.slotMapping]);
  assert.deepEqual([...words.subarray(layout.logitsIndices, layout.logitsIndices + 3)], [2, 3, 23]);
  assert.deepEqual([...words.subarray(layout.tokenToSeq, layout.tokenToSeq + 24)],
    [0, 0, 0, 1, ...Array(20).fill(2)]);
  assert.deepEqual([...words.subarray(layout.queryStartLoc, layout.queryStartLoc + 4)], [0, 3, 4, 24]);
  const row = (s: number) => [...words.subarray(layout.blockTables + s * layout.blockTableStride,
    layout.blockTables + s * layout.blockTableStride + 3)];
  assert.deepEqual([row(0), row(1), row(2)], [[4, 9, 2], [6, 0, 0], [3, 8, 0]]);
  // one tile per sequence of several rows (none has more than PREFILL_TILE_ROWS); the one-token sequence has none
  assert.equal(PREFILL_TILE_ROWS, 64);
  assert.equal(packed.numTiles, 2);
  assert.deepEqual([...words.subarray(layout.tiles, layout.tiles + 4)], [0, 0, 2, 4]);
  assert.equal(packed.decodeOnly, false);
  // the one-token row (sequence 1, token 3) heads rowOrder, for the decode kernel; the rest follow in token order
  assert.equal(packed.numDecodeRows, 1);
  assert.deepEqual([...words.subarray(layout.rowOrder, layout.rowOrder + 24)], [3, 0, 1, 2, ...Array.from({ length: 20 }, (_, i) => 4 + i)]);
});

test('packStep packs an MTP head\'s carryRows at their offset (a step without them leaves the section alone)', () => {
  const batch = { ...batchOf([{ ids: [1, 2, 3], start: 30, pages: [4, 9, 2] }, { ids: [7], start: 5, pages: [6] }], 16, [2, 3]),
    carryRows: Int32Array.from([5, 0, 2, 9]) };
  const layout = layoutFor(batch, null);
  const words = new Int32Array(layout.totalWords).fill(-7);
  packStep(batch, layout, words);
  assert.deepEqual([...words.subarray(layout.carryRows, layout.carryRows + 4)], [5, 0, 2, 9]);
  const plain = new Int32Array(layout.totalWords).fill(-7);
  packStep({ ...batch, carryRows: undefined }, layout, plain);
  assert.deepEqual([...plain.subarray(layout.carryRows, layout.carryRows + 4)], [-7, -7, -7, -7]);
});

test('packStep leaves a mixed step\'s one-token rows out of the prefill tiles and orders them longest first', () => {
  const batch = batchOf([{ ids: [1], start: 30, pages: [4, 9] }, { ids: Array.from({ length: 70 }, (_, i) => i), start: 0, pages: [0, 1, 2, 3, 5] },
    { ids: [2], start: 700, pages: Array.from({ length: 44 }, (_, i) => 10 + i) }, { ids: [7, 8], start: 3, pages: [6] }], 16);
  const layout = layoutFor(batch, null);
  const words = new Int32Array(layout.totalWords).fill(-7);
  const packed = packStep(batch, layout, words);
  assert.deepEqual([packed.decodeOnly, packed.numDecodeRows, packed.numTiles], [false, 2, 3]);
  // tiles of sequence 1 (rows 1 .. 70, two tiles) and sequence 3 (rows 72, 73)
  assert.deepEqual([...words.subarray(layout.tiles, layout.tiles + 6)], [1, 1, 1, 65, 3, 72]);
  assert.deepEqual([...words.subarray(layout.rowOrder, layout.rowOrder + 4)], [71, 0, 1, 2]);
  assert.equal(words[layout.rowOrder + 73], 73);
});

test('packStep orders a decode step\'s rows by kv length, longest first, ties in token order', () => {
  const batch = batchOf([{ ids: [1], start: 30, pages: [4, 9] }, { ids: [7], start: 5, pages: [6] },
    { ids: [2], start: 700, pages: Array.from({ length: 44 }, (_, i) => i) }, { ids: [3], start: 30, pages: [1, 2] },
    { ids: [4], start: 0, pages: [5] }], 16, [0, 1, 2, 3, 4]);
  const layout = layoutFor(batch, null);
  const words = new Int32Array(layout.totalWords).fill(-7);
  assert.equal(packStep(batch, layout, words).decodeOnly, true);
  assert.deepEqual([...words.subarray(layout.rowOrder, layout.rowOrder + 5)], [2, 0, 3, 1, 4]);
  assert.equal(words[layout.rowOrder + 5], -7);
});

test('packRowOrder is a permutation: one-token rows longest first, then the rest in token order', () => {
  let seed = 7;
  const rnd = () => ((seed = (seed * 1103515245 + 12345) >>> 0) / 2 ** 32);
  for (const numSeqs of [1, 2, 3, 17, 256, 1000]) {
    const lens = Array.from({ length: numSeqs }, () => (rnd() < 0.7 ? 1 : 1 + Math.floor(rnd() * 5)));
    const queryStartLoc = Int32Array.from([0, ...lens.map((_, s) => lens.slice(0, s + 1).reduce((a, b) => a + b, 0))]);
    const n = queryStartLoc[numSeqs]!;
    const positions = Int32Array.from({ length: n }, () => Math.floor(rnd() * (numSeqs < 20 ? 4 : 5000)));
    const words = new Int32Array(n + 2).fill(-1);
    const numOne = packRowOrder(queryStartLoc, numSeqs, positions, words, 1);
    const order = [...words.subarray(1, n + 1)];
    assert.deepEqual([...order].sort((a, b) => a - b), [...Array(n).keys()], `${numSeqs} seqs: not a permutation`);
    const single = new Set(lens.flatMap((len, s) => (len === 1 ? [queryStartLoc[s]!] : [])));
    assert.equal(numOne, single.size);
    assert.ok(order.slice(0, numOne).every((t) => single.has(t)), `${numSeqs} seqs: a prompt row among the decode rows`);
    for (let i = 1; i < numOne; i++) {
      const [a, b] = [order[i - 1]!, order[i]!];
      assert.ok(positions[a]! > positions[b]! || (positions[a] === positions[b] && a < b), `${numSeqs} seqs: rows ${a}, ${b} out of order`);
    }
    const rest = order.slice(numOne);
    assert.deepEqual(rest, [...rest].sort((a, b) => a - b), `${numSeqs} seqs: prompt rows out of token order`);
    assert.deepEqual([words[0], words[n + 1]], [-1, -1]);
  }
});

test('packTiles cuts each sequence into tiles of tileRows rows, the last one short', () => {
  const queryStartLoc = Int32Array.of(0, 150, 151, 151, 215);
  const words = new Int32Array(20).fill(-7);
  assert.equal(packTiles(queryStartLoc, 4, 64, words, 2), 5);
  assert.deepEqual([...words.subarray(0, 14)], [-7, -7, 0, 0, 0, 64, 0, 128, 1, 150, 3, 151, -7, -7]);
  assert.equal(packTiles(queryStartLoc, 4, 16, new Int32Array(40), 0), 10 + 1 + 4);
  const batch = batchOf([{ ids: Array.from({ length: 130 }, (_, i) => i), start: 300, pages: [...Array(30).keys()] }], 16);
  const layout = layoutFor(batch, null);
  const packed = packStep(batch, layout, new Int32Array(layout.totalWords));
  assert.equal(packed.numTiles, Math.ceil(130 / PREFILL_TILE_ROWS));
  assert.ok(layout.capTiles >= packed.numTiles);
});

test('layoutFor keeps a layout the batch fits and grows it otherwise', () => {
  const small = batchOf([{ ids: [1], start: 3, pages: [0] }], 16, [0]);
  const first = layoutFor(small, null);
  assert.equal(layoutFor(small, first), first);
  const longSeq = batchOf([{ ids: [1], start: 16 * 100, pages: Array.from({ length: 101 }, (_, i) => i) }], 16, [0]);
  const grown = layoutFor(longSeq, first);
  assert.notEqual(grown, first);
  assert.ok(grown.blockTableStride >= 101 && grown.capTokens >= first.capTokens);
  const words = new Int32Array(grown.totalWords);
  assert.equal(packStep(small, grown, words).decodeOnly, true);
});

test('StepWorkspace: layer arenas rewind two layers on; allocForStep ranges outlive every layer of the step', () => {
  let next = 1n << 20n;
  const ws = new StepWorkspace({ alloc: (b) => { const p = next; next += BigInt(b) + 4096n; return p; }, free: () => {} }, 1 << 16);
  const inStep = ws.alloc(512);
  ws.beginLayer(0);
  const layer0 = ws.alloc(1024);
  const table = ws.allocForStep(1024);
  assert.ok(table >= inStep + 512n, 'allocForStep takes the step arena after what the step took before the layers');
  ws.beginLayer(1);
  const layer1 = ws.alloc(1024);
  ws.beginLayer(2);
  assert.equal(ws.alloc(1024), layer0, 'layer 2 reuses layer 0\'s arena');
  ws.beginLayer(3);
  assert.equal(ws.alloc(1024), layer1);
  ws.endLayers();
  const after = ws.alloc(256);
  assert.ok(after >= table + 1024n, 'the step arena goes on after the table');
  ws.reset();
  assert.equal(ws.alloc(512), inStep);
});

test('DeviceWorkspace hands out aligned, disjoint ranges and repeats them after reset', () => {
  let next = 1n << 20n;
  const allocs: number[] = [];
  const freed: bigint[] = [];
  const ws = new DeviceWorkspace({ alloc: (b) => { allocs.push(b); const p = next; next += BigInt(b) + 4096n; return p; },
    free: (p) => { freed.push(p); } }, 4096);
  const a = ws.alloc(10);
  const b = ws.alloc(300);
  assert.equal(b - a, 256n);
  assert.equal(Number(b % 256n), 0);
  ws.alloc(4000);
  assert.ok(ws.needsMerge, 'spilled into a second chunk');
  ws.reset();
  assert.equal(freed.length, 2);
  assert.equal(ws.generation, 1);
  const a2 = ws.alloc(10);
  const b2 = ws.alloc(300);
  ws.alloc(4000);
  assert.ok(!ws.needsMerge, 'merged arena holds the whole step');
  ws.reset();
  assert.deepEqual([ws.alloc(10), ws.alloc(300)], [a2, b2]);
  ws.frozen = true;
  assert.throws(() => ws.alloc(1 << 20), /graph capture/);
});

test('profileTable folds ops into buckets and charges the uncovered time to host gaps', () => {
  const { rows, stepMs } = profileTable([
    { bucket: 'gemm qkv', startMs: 0, endMs: 2 }, { bucket: 'attention', startMs: 3, endMs: 4 },
    { bucket: 'gemm qkv', startMs: 4, endMs: 6 }, { bucket: 'norm', startMs: 9, endMs: 10 }]);
  assert.equal(stepMs, 10);
  const by = Object.fromEntries(rows.map((r) => [r.bucket, r]));
  assert.equal(by['gemm qkv']!.totalMs, 4);
  assert.equal(by['gemm qkv']!.numCalls, 2);
  assert.equal(by['host gaps']!.totalMs, 4);
  assert.equal(rows[0]!.bucket, 'gemm qkv');
  assert.ok(Math.abs(rows.reduce((s, r) => s + r.share, 0) - 1) < 1e-12);
  assert.match(formatProfile(rows, stepMs), /gemm qkv\s+2\s+4\.000\s+40\.0%/);
});

test('library discovery finds python wheels and names the library, the places and the fix when missing', () => {
  const root = mkdtempSync(join(tmpdir(), 'quire-discover-'));
  try {
    const lib = join(root, 'lib', 'python3.12', 'site-packages', 'nvidia', 'cu13', 'lib');
    mkdirSync(lib, { recursive: true });
    writeFileSync(join(lib, 'libnvrtc.so.13'), '');
    const env = { VIRTUAL_ENV: root, LD_LIBRARY_PATH: '' };
    assert.ok(libraryCandidates('nvrtc', env).includes(join(lib, 'libnvrtc.so.13')));
    const err = (() => {
      try {
        loadLibrary('cublasLt', () => { throw new Error('nope'); }, env);
      } catch (e) {
        return e;
      }
      return null;
    })();
    assert.ok(err instanceof LibraryNotFoundError);
    assert.match(err.message, /libcublasLt\.so\.13 not found/);
    assert.match(err.message, /nvidia\/cu13\/lib/);
    assert.match(err.message, /pip install nvidia-cublas/);
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
});

test('bf16 bytes read back as the exact f32 values', () => {
  const values = new Float32Array([1, -2.5, 3.140625, 0, 65280]);
  const bits = f32ToBf16(values);
  assert.deepEqual(bf16BytesToF32(bits.buffer as ArrayBuffer, values.length), values);
});
