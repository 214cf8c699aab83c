// Decode attention at Qwen2.5's odd GQA groups (7 query heads a kv head at D 128 and 64, 6 and 5 at D 128): in a
// batch large enough for the kernel's whole-group build (each K/V page read once for the group), eager and graphed,
// rows of short to long kv lengths have the bits they have alone (one query head a block). The cache is random bf16
// pages; the workspace is poisoned before every run.

import { after, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { f32ToBf16 } from '../../src/loader/dtype.js';
import { decodeGroup } from '../../src/backend/cuda/decode-splits.js';
import { batchOf } from '../backend/helpers.js';
import { newCuda, noCuda, randomBf16 } from './cuda-helpers.js';

const blockSize = 16;
const numRows = 200;

describe('CUDA decode attention, odd GQA groups', { skip: noCuda }, () => {
  const cuda = noCuda ? null : newCuda();
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
});
