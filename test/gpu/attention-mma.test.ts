// Decode attention's rounds on tensor cores (the _mma builds, QUIRE_DECODE_MMA; kernels/attention_decode_mma.cuh):
// attention.test.js passes again with the knob on (paged attention against the CPU backend on prefill, chunked,
// mixed and decode-only steps, one split and several, and the fused rope's bits against rope.cu's plus kv_write);
// on random bf16 pages, a batch of 200 rows of 1 to 1,800 positions (whole GQA groups a block, splits walked by one
// block or published) has the bits each row has alone (one query head a block, its splits spread over blocks),
// eager and graphed, at GQA groups of 2 to 8 and head dims 64 and 128; and those outputs are within bf16 of the
// CUDA-core kernel's, whose bits they are not. QUIRE_DECODE_MMA=groups gives the _mma builds' bits at G 8 and the
// CUDA-core kernel's at G 2, and in the batch-invariant mode the CUDA-core kernel's at G 8; a single 16k row of
// qwen3-8b's shape keeps its whole groups there (QUIRE_DECODE_MMA_GROUP_FILL). A lone row past 4k splits up to 32
// times (QUIRE_DECODE_MMA_MAX_SPLITS), eager as graphed; in a batch its rows split as at 16. The workspace is
// poisoned before every run.

import { after, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import type { CudaBackend } from '../../src/backend/cuda/cuda-backend.js';
import { decodeGroup, GROUP_FILL } from '../../src/backend/cuda/decode-splits.js';
import { f32ToBf16 } from '../../src/loader/dtype.js';
import { batchOf } from '../backend/helpers.js';
import { assertBf16Close, newCuda, noCuda, randomBf16, rerunWith } from './cuda-helpers.js';

const blockSize = 16;
const numRows = 200;

describe('CUDA decode attention on tensor cores (QUIRE_DECODE_MMA)', { skip: noCuda }, () => {
  const mma = noCuda ? null : newCuda({ decodeMma: 'all' });
  const plain = noCuda ? null : newCuda({ decodeMma: 'off' });
  after(() => {
    mma?.dispose();
    plain?.dispose();
  });

  test('attention.test.js passes with QUIRE_DECODE_MMA=1 (the CPU backend\'s outputs, the fused rope\'s bits)', () => {
    const out = rerunWith(new URL('./attention.test.js', import.meta.url).href, { QUIRE_DECODE_MMA: '1' });
    assert.match(out, /^# pass [1-9]/m);
    assert.match(out, /^# fail 0$/m);
  });

  // [heads, kv heads, head dim]: qwen3-30b-a3b's group of 8, qwen3-8b's 4, Qwen2.5's odd 7 (D 128 and 64), 0.6b's 2
  for (const [H, KV, D] of [[32, 4, 128], [32, 8, 128], [28, 4, 128], [14, 2, 64], [16, 8, 128]] as const) {
    test(`${H} heads over ${KV} kv heads, D ${D}: a row's bits in a batch of ${numRows} are its bits alone, `
      + 'within bf16 of the CUDA-core kernel\'s', () => {
      const group = H / KV;
      assert.equal(decodeGroup(numRows, H, KV, mma!.device.numSMs, D), group, 'the batch takes the whole-group build');
      assert.equal(decodeGroup(1, H, KV, mma!.device.numSMs, D), 1, 'a row alone: one head a block');
      const [whole, viaPlain] = [mma!, plain!].map((c) => decodeBits(c, H, KV, D));
      const got = new Float32Array(whole.buffer);
      assert.equal(got.findIndex((x) => !Number.isFinite(x)), -1, 'every output written');
      assertBf16Close(got, new Float32Array(viaPlain.buffer), 'against the CUDA-core kernel');
      assert.notDeepEqual(whole, viaPlain, 'the _mma builds ran (their sums are their own)');
      const lens = batchLens();
      assert.deepEqual(decodeBits(mma!, H, KV, D, lens, undefined, true), whole, `G ${group}: graphed against eager`);
      for (const at of [0, 3, 77, 150, numRows - 1]) {
        assert.deepEqual(decodeBits(mma!, H, KV, D, lens, at), whole.slice(at * H * D, (at + 1) * H * D),
          `G ${group}: row ${at} (kv ${lens[at]}) against alone`);
      }
    });
  }

  test('groups takes the _mma builds at G 8, not at G 2; the batch-invariant mode keeps the CUDA-core kernel', () => {
    const groups = newCuda({ decodeMma: 'groups' });
    const invariant = newCuda({ batchInvariant: true, decodeMma: 'groups' });
    try {
      for (const [H, KV] of [[32, 4], [16, 8]] as const) {
        const [viaMma, viaPlain, viaGroups, viaInvariant] = [mma!, plain!, groups, invariant]
          .map((c) => decodeBits(c, H, KV, 128));
        assert.notDeepEqual(viaMma, viaPlain, `${H} over ${KV}: the two kernels' bits differ`);
        assert.deepEqual(viaGroups, H / KV >= 4 ? viaMma : viaPlain, `${H} over ${KV}: groups`);
        assert.deepEqual(viaInvariant, viaPlain, `${H} over ${KV}: the batch-invariant mode`);
      }
    } finally {
      groups.dispose();
      invariant.dispose();
    }
  });

  test('QUIRE_DECODE_MMA_MAX_SPLITS (32): a lone long row splits more than at 16, graphed as eager, within bf16 of the '
    + 'CUDA-core kernel; in a batch of 10 rows (a grid past one block a SM at 16) every row splits as at 16', () => {
    const [H, KV, D] = [32, 8, 128];
    const lens = [16384, 9001, 300, 5000, 4097, 1, 12000, 33, 8000, 2500];
    const narrow = newCuda({ decodeMma: 'all', decodeMmaMaxSplits: 16 });
    try {
      assert.deepEqual(decodeBits(mma!, H, KV, D, lens), decodeBits(narrow, H, KV, D, lens), 'the batch: cap 16 alike');
      const f32 = (b: Uint32Array) => new Float32Array(b.buffer);
      for (const [i, len] of [[0, 16384], [6, 12000], [9, 2500]] as const) {
        const [at32, at16, viaPlain] = [mma!, narrow, plain!].map((c) => decodeBits(c, H, KV, D, lens, i));
        if (len > 4096) assert.notDeepEqual(at32, at16, `row ${i} (kv ${len}) alone splits more at 32`);
        else assert.deepEqual(at32, at16, `row ${i} (kv ${len}): the same splits at either cap`);
        assertBf16Close(f32(at32), f32(viaPlain), `row ${i} against the CUDA-core kernel`);
        assert.deepEqual(decodeBits(mma!, H, KV, D, lens, i, true), at32, `row ${i} graphed against eager`);
      }
    } finally {
      narrow.dispose();
    }
  });

  test('groups: a single 16k row of qwen3-8b\'s shape keeps its whole groups of 4 on the tensor cores', (t) => {
    // 8 kv heads x 16 splits = 128 blocks: whole groups from MMA_GROUP_FILL (0.9) blocks a SM, not GROUP_FILL's 4
    const numSMs = mma!.device.numSMs;
    if (decodeGroup(1, 32, 8, numSMs, 128, 8, 16, GROUP_FILL, 4) !== 4) return t.skip(`${numSMs} SMs: G 1 here`);
    const groups = newCuda({ decodeMma: 'groups' });
    try {
      const [viaMma, viaPlain, viaGroups] = [mma!, plain!, groups].map((c) => decodeBits(c, 32, 8, 128, [16384]));
      assert.notDeepEqual(viaMma, viaPlain, 'the two kernels\' bits differ');
      assert.deepEqual(viaGroups, viaMma, 'groups: the _mma bits');
    } finally {
      groups.dispose();
    }
  });
});

/** numRows kv lengths of 1 to 1,800. */
function batchLens(): number[] {
  return Array.from({ length: numRows }, (_, i) => 1 + ((i * 7919 + 5) % 1800));
}

/** K/V pages' random bf16 by size and seed: the 57k-position cases would otherwise spend minutes in the PRNG. */
const pageValues = new Map<string, Uint16Array>();
function randomPage(elements: number, seed: number): Uint16Array {
  const key = `${elements}:${seed}`;
  let bits = pageValues.get(key);
  if (!bits) pageValues.set(key, bits = f32ToBf16(randomBf16(elements, seed, -2, 2)));
  return bits;
}

/** Graph keys, one a graphed decodeBits call (a backend's graphs are cached by key). */
let nextGraphKey = 9000;

/**
 * One decode step of rows of `lens` positions (batchLens') of random bf16 on `c`: the output's bits; of row `only`
 * alone (the same pages and values), or replayed from a CUDA graph (`graphed`).
 */
function decodeBits(c: CudaBackend, H: number, KV: number, D: number, lens = batchLens(), only?: number,
  graphed = false): Uint32Array {
  let next = 0;
  const pages = lens.map((len) => Array.from({ length: Math.ceil(len / blockSize) }, () => next++));
  c.allocateKvCache({ numBlocks: next, blockSize, numLayers: 1, numKvHeads: KV, headDim: D });
  const { k, v } = c.kvLayer(0);
  const elements = next * blockSize * KV * D;
  c.device.upload(k, randomPage(elements, 33 + D));
  c.device.upload(v, randomPage(elements, 34 + D));
  const width = (H + 2 * KV) * D;
  c.reserveStepCapacity(lens.length, lens.length, Math.max(...pages.map((p) => p.length)));
  const values = randomBf16(lens.length * width, 35 + H, -2, 2);
  const rows = only === undefined ? lens.map((_, i) => i) : [only];
  const qkv = c.fromHost([rows.length, width], only === undefined ? values
    : values.slice(only * width, (only + 1) * width));
  const batch = batchOf(rows.map((i) => ({ ids: [i % 50], start: lens[i]! - 1, pages: pages[i]! })), blockSize);
  const run = () => {
    const step = c.beginStep(batch);
    c.fillWorkspace(0xff);
    return c.toHost(c.attention(qkv, 0, H, KV, 1 / Math.sqrt(D), step));
  };
  if (!graphed) return new Uint32Array(run().buffer);
  const key = nextGraphKey++;
  c.graph(key, batch, run);  // runs eagerly, then captures
  const replays = c.numGraphReplays;
  const out = new Uint32Array(c.graph(key, batch, run).buffer);
  assert.equal(c.numGraphReplays, replays + 1, 'the second call replays the graph');
  return out;
}
