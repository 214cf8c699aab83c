// Paged attention (KV write + attention) against the CPU reference: pages
// scrambled across the pool, chunked prefill continuing a cached prefix, mixed
// prefill + decode steps, decode-only steps (split-KV + merge), GQA. The CUDA
// KV cache starts as NaN, so reading any slot that was never written shows.

import { after, describe, test } from 'node:test';
import type { ForwardBatch } from '../../src/model/batch.js';
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
});
