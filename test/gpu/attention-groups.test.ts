// Decode attention at Qwen2.5's odd GQA groups (7 query heads a kv head at D 128 and 64, 6 and 5 at D 128): in a
// batch large enough for the kernel's whole-group build (each K/V page read once for the group), eager and graphed,
// rows of short to long kv lengths have the bits they have alone (one query head a block). The cache is random bf16
// pages; the workspace is poisoned before every run.

import { after, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { f32ToBf16 } from '../../src/loader/dtype.js';
import { decodeGroup, decodeHeadGroups } from '../../src/backend/cuda/decode-splits.js';
import { batchOf } from '../backend/helpers.js';
import { newCuda, noCuda, randomBf16, rerunWith } from './cuda-helpers.js';

const blockSize = 16;
const numRows = 200;

describe('CUDA decode attention, odd GQA groups', { skip: noCuda }, () => {
  // the CUDA-core kernel's builds (QUIRE_DECODE_MMA=groups takes the _mma builds at G 4 and up: attention-mma.test.ts)
  const cuda = noCuda ? null : newCuda({ decodeMma: 'off' });
  after(() => cuda?.dispose());

  for (const [H, KV, D] of [[28, 4, 128], [14, 2, 64], [12, 2, 128], [40, 8, 128]] as const) {
    test(`${H} heads over ${KV} kv heads, D ${D}: the group's build gives the bits of one head a block`, () => {
      const c = cuda!;
      const group = H / KV;
      assert.equal(decodeGroup(numRows, H, KV, c.device.numSMs, D), group, 'the batch takes the whole-group build');
      const lens = Array.from({ length: numRows }, (_, i) => 1 + ((i * 7919 + 5) % 1800));
      let next = 0;
      const pages = lens.map((len) => Array.from({ length: Math.ceil(len / blockSize) }, () => next++));
      c.allocateKvCache({ numBlocks: next, blockSize, numLayers: 1, numKvHeads: KV, headDim: D });
      const { k, v } = c.kvLayer(0);
      const elements = next * blockSize * KV * D;
      c.device.upload(k, f32ToBf16(randomBf16(elements, 3 + D, -2, 2)));
      c.device.upload(v, f32ToBf16(randomBf16(elements, 4 + D, -2, 2)));
      const width = (H + 2 * KV) * D;
      const scale = 1 / Math.sqrt(D);
      const batch = batchOf(lens.map((len, i) => ({ ids: [i % 50], start: len - 1, pages: pages[i]! })), blockSize);
      const qkvValues = randomBf16(numRows * width, 5 + H, -2, 2);
      const qkv = c.fromHost([numRows, width], qkvValues);
      c.reserveStepCapacity(numRows, numRows, Math.max(...pages.map((p) => p.length)));
      const step = c.beginStep(batch);
      c.fillWorkspace(0xff);
      const out = c.toHost(c.attention(qkv, 0, H, KV, scale, step));
      assert.equal(out.findIndex((x) => !Number.isFinite(x)), -1, 'every output written');
      const whole = new Uint32Array(out.buffer);
      const graphed = new Uint32Array(c.graph(numRows + D + H, batch, () => {
        const step = c.beginStep(batch);
        c.fillWorkspace(0xff);
        return c.toHost(c.attention(qkv, 0, H, KV, scale, step));
      }).buffer);
      assert.deepEqual(graphed, whole, `G ${group}: graphed against eager`);
      assert.equal(decodeGroup(1, H, KV, c.device.numSMs, D), 1, 'a row alone: one head a block');
      for (const at of [0, 3, 77, 150, numRows - 1]) {
        const alone = batchOf([{ ids: [at % 50], start: lens[at]! - 1, pages: pages[at]! }], blockSize);
        const aloneStep = c.beginStep(alone);
        c.fillWorkspace(0xff);
        const row = c.toHost(c.attention(c.fromHost([1, width], qkvValues.slice(at * width, (at + 1) * width)), 0, H, KV,
          scale, aloneStep));
        assert.deepEqual(new Uint32Array(row.buffer), whole.slice(at * H * D, (at + 1) * H * D),
          `G ${group}: row ${at} (kv ${lens[at]}) against alone`);
      }
    });
  }

  // Four heads a block as side-by-side G 1 blocks (the _hg4 builds, QUIRE_DECODE_HEAD_GROUPS=4): qwen3-8b's heads, a
  // single long row and 4 rows of 300 to 5,000 positions (published splits, several a block), eager and graphed; their
  // md5 in a process with the knob must be this one's without it
  const headGroupsRun = process.env.QUIRE_DECODE_HEAD_GROUPS === '4';
  function headGroupsMd5(c: NonNullable<typeof cuda>): string {
    const [H, KV, D] = [32, 8, 128];
    const lens = [5000, 300, 1200, 4100, 2049, 777, 3333, 4999];
    let next = 0;
    const pages = lens.map((len) => Array.from({ length: Math.ceil(len / blockSize) }, () => next++));
    c.allocateKvCache({ numBlocks: next, blockSize, numLayers: 1, numKvHeads: KV, headDim: D });
    const { k, v } = c.kvLayer(0);
    const elements = next * blockSize * KV * D;
    c.device.upload(k, f32ToBf16(randomBf16(elements, 13, -2, 2)));
    c.device.upload(v, f32ToBf16(randomBf16(elements, 14, -2, 2)));
    const width = (H + 2 * KV) * D;
    const qkvValues = randomBf16(lens.length * width, 15, -2, 2);
    const hash = createHash('md5');
    // 4 rows: 4 x 8 x 16 whole-group blocks stay under GROUP_FILL's 4 a SM, so one head a block (G 1), as alone
    for (const rows of [[0], [0, 1, 2, 3]]) {
      const batch = batchOf(rows.map((i) => ({ ids: [i], start: lens[i]! - 1, pages: pages[i]! })), blockSize);
      const qkv = c.fromHost([rows.length, width], qkvValues.slice(0, rows.length * width));
      c.reserveStepCapacity(rows.length, rows.length, Math.max(...pages.map((p) => p.length)));
      const run = () => {
        const step = c.beginStep(batch);
        c.fillWorkspace(0xff);
        return c.toHost(c.attention(qkv, 0, H, KV, 1 / Math.sqrt(D), step));
      };
      const eager = run();
      assert.equal(eager.findIndex((x) => !Number.isFinite(x)), -1, 'every output written');
      assert.deepEqual(c.graph(9000 + rows.length, batch, run), eager, `${rows.length} rows: graphed against eager`);
      hash.update(new Uint32Array(eager.buffer));
    }
    return hash.digest('hex');
  }

  test('four heads a block side by side (QUIRE_DECODE_HEAD_GROUPS=4) give the bits of one head a block',
    { skip: headGroupsRun ? 'this is that run' : false }, () => {
      assert.equal(decodeHeadGroups(1, 128, 'bf16', 32, 8, false, false, 1), 1);
      const out = rerunWith(import.meta.url, { QUIRE_DECODE_HEAD_GROUPS: '4' }, 'head groups md5');
      assert.equal(/head groups md5 ([0-9a-f]{32})/.exec(out)?.[1], headGroupsMd5(cuda!));
    });

  test('head groups md5 (the child run of the test above)', { skip: headGroupsRun ? false : 'only in the child run' }, (t) => {
    assert.equal(decodeHeadGroups(1, 128, 'bf16', 32, 8, false, false), 4, 'the knob reached the launch plan');
    t.diagnostic(`head groups md5 ${headGroupsMd5(cuda!)}`);
  });
});
