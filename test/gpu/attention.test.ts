// Paged attention (KV write + attention) against the CPU reference: pages
// scrambled across the pool, chunked prefill continuing a cached prefix, mixed
// prefill + decode steps, decode-only steps (split-KV + merge), GQA. The CUDA
// KV cache starts as NaN, so reading any slot that was never written shows.

import { after, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import type { ForwardBatch } from '../../src/model/batch.js';
import { defaultInvFreq } from '../../src/model/rope.js';
import { batchOf, shuffled } from '../backend/helpers.js';
import { assertBf16Close, newCpu, newCuda, noCuda, randomBf16, uploadBoth } from './cuda-helpers.js';

interface Seq {
  ids: number[];
  start: number;
  pages: number[];
}

describe('CUDA paged attention vs CPU', { skip: noCuda }, () => {
  const cpu = noCuda ? null : newCpu();
  const cuda = noCuda ? null : newCuda();
  after(() => {
    cpu?.dispose();
    cuda?.dispose();
  });

  for (const [D, H, KV] of [[64, 4, 2], [128, 4, 2], [128, 8, 8], [128, 16, 4], [128, 16, 2], [64, 12, 2], [256, 8, 1]]) {
    test(`head dim ${D}, ${H} q heads / ${KV} kv heads: prefill, chunked prefill + decode, decode-only with long context`, () => {
      const [blockSize, numBlocks, layer] = [16, 48, 1];
      const spec = { numBlocks, blockSize, numLayers: 2, numKvHeads: KV, headDim: D };
      cpu!.allocateKvCache(spec);
      cuda!.allocateKvCache(spec);
      cuda!.fillKvCache(0xff);
      const perm = shuffled(numBlocks, D);
      const pagesA = perm.slice(0, 5);
      const pagesB = perm.slice(5, 10);
      const pagesC = perm.slice(10, 30);
      const pagesD = perm.slice(30, 31);
      const ids = (n: number) => Array.from({ length: n }, (_, i) => (i * 7) % 50);
      const steps: { name: string; seqs: Seq[] }[] = [
        { name: 'prefill', seqs: [{ ids: ids(40), start: 0, pages: pagesA }, { ids: ids(70), start: 0, pages: pagesB },
          { ids: ids(300), start: 0, pages: pagesC }] },
        { name: 'chunked prefill + decode', seqs: [{ ids: ids(24), start: 40, pages: pagesA },
          { ids: ids(1), start: 70, pages: pagesB }] },
        { name: 'decode-only', seqs: [{ ids: ids(1), start: 64, pages: pagesA }, { ids: ids(1), start: 71, pages: pagesB },
          { ids: ids(1), start: 300, pages: pagesC }, { ids: ids(1), start: 0, pages: pagesD }] },
      ];
      steps.forEach(({ name, seqs }, i) => {
        const batch: ForwardBatch = batchOf(seqs, blockSize);
        const width = (H + 2 * KV) * D;
        const T = batch.numTokens;
        const [qc, qg] = uploadBoth(cpu!, cuda!, 'qkv', [T, width], randomBf16(T * width, 100 * D + i, -2, 2));
        const sc = cpu!.beginStep(batch);
        const sg = cuda!.beginStep(batch);
        cuda!.fillWorkspace(0xff);
        const scale = 1 / Math.sqrt(D);
        const outG = cuda!.toHost(cuda!.attention(qg, layer, H, KV, scale, sg));
        const outC = cpu!.toHost(cpu!.attention(qc, layer, H, KV, scale, sc));
        assertBf16Close(outG, outC, `${name} (D=${D})`);
      });
    });
  }

  for (const [D, H, KV] of [[128, 16, 8], [64, 12, 2]]) {
    test(`head dim ${D}: qkNormRope given the layer writes k and v to the cache, bit for bit as kv_write does`, () => {
      const [blockSize, numBlocks] = [16, 40];
      const spec = { numBlocks, blockSize, numLayers: 2, numKvHeads: KV, headDim: D };
      cuda!.allocateKvCache(spec);
      cuda!.fillKvCache(0xff);
      const perm = shuffled(numBlocks, D + 1);
      const rope = { headDim: D, invFreq: defaultInvFreq(D, 1e6) };
      const ids = (n: number) => Array.from({ length: n }, (_, i) => (i * 5) % 50);
      const steps: Seq[][] = [
        [{ ids: ids(37), start: 0, pages: perm.slice(0, 3) }, { ids: ids(200), start: 0, pages: perm.slice(3, 17) }],
        [{ ids: ids(1), start: 37, pages: perm.slice(0, 3) }, { ids: ids(1), start: 200, pages: perm.slice(3, 17) }],
      ];
      const scale = 1 / Math.sqrt(D);
      steps.forEach((seqs, i) => {
        const batch = batchOf(seqs, blockSize);
        const width = (H + 2 * KV) * D;
        const T = batch.numTokens;
        const data = randomBf16(T * width, 7 * D + i, -2, 2);
        const norm = cuda!.fromHost([D], randomBf16(D, 3 * D + i, 0.5, 1.5));
        const step = cuda!.beginStep(batch);
        // layer 0: the fused write; layer 1: rope, then attention's own kv_write
        const fused = cuda!.fromHost([T, width], data);
        cuda!.qkNormRope(fused, norm, norm, 1e-6, H, KV, rope, step, 0);
        const outFused = cuda!.toHost(cuda!.attention(fused, 0, H, KV, scale, step));
        const plain = cuda!.fromHost([T, width], data);
        cuda!.qkNormRope(plain, norm, norm, 1e-6, H, KV, rope, step);
        const outPlain = cuda!.toHost(cuda!.attention(plain, 1, H, KV, scale, step));
        assert.ok(outFused.every(Number.isFinite), `step ${i}: an output read a slot that was never written`);
        assert.deepEqual(new Uint32Array(outFused.buffer), new Uint32Array(outPlain.buffer), `step ${i} (D=${D})`);
      });
    });
  }
});
