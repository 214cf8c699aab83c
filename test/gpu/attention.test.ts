// Paged attention (KV write + attention) against the CPU reference: pages
// scrambled across the pool, chunked prefill continuing a cached prefix, mixed
// prefill + decode steps, decode-only steps (split-KV + merge), GQA. The CUDA
// KV cache starts as NaN, so reading any slot that was never written shows.

import { after, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import type { ForwardBatch } from '../../src/backend/batch.js';
import { defaultInvFreq } from '../../src/model/rope.js';
import { CudaTensor } from '../../src/backend/cuda/cuda-backend.js';
import { CpuBackend } from '../../src/backend/cpu/cpu-backend.js';
import { batchOf, shuffled } from '../backend/helpers.js';
import { assertBf16Close, newCuda, noCuda, randomBf16, uploadBoth } from './cuda-helpers.js';

interface Seq {
  ids: number[];
  start: number;
  pages: number[];
}

// Each again with an FP8 E4M3 cache (--kv-cache-dtype fp8): the CPU rounds what it stores as the GPU does, and the
// bf16 inputs here are the values both round.
for (const kvCacheDtype of ['auto', 'fp8_e4m3'] as const) describe(`CUDA paged attention vs CPU, KV cache ${kvCacheDtype}`, { skip: noCuda }, () => {
  const fp8 = kvCacheDtype === 'fp8_e4m3';
  const cpu = noCuda ? null : new CpuBackend({ kvCacheBytes: 64 << 20, numThreads: 1, kvCacheDtype });
  const cuda = noCuda ? null : newCuda({ kvCacheDtype });
  after(() => {
    cpu?.dispose();
    cuda?.dispose();
  });

  for (const [D, H, KV] of [[64, 4, 2], [128, 4, 2], [128, 8, 8], [128, 16, 4], [128, 16, 2], [64, 12, 2], [256, 8, 1]]) {
    test(`head dim ${D}, ${H} q heads / ${KV} kv heads: prefill, chunked prefill + decode, decode-only with long context (${kvCacheDtype})`, () => {
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

  // Layer 0 takes qkNormRope's cache write (a decode-only step: inside the decode attention kernel, rope.cu's kernel
  // not launched), layer 1 the rope kernel then attention's kv_write: the same outputs and the same cache bytes, rows
  // of one split and of several (short and long splits), one query head a block and the kv head's group; also with
  // partial rotary (Qwen3.5's 64 of 256 channels; a quarter, a half of a head), the fused prologue's pass-through pairs.
  for (const [D, H, KV, rot] of [[128, 16, 8, 128], [64, 12, 2, 64], [256, 16, 2, 64], [128, 16, 4, 32], [64, 12, 2, 32]]) {
    const partial = rot < D ? `, ${rot} rotary channels` : '';
    test(`head dim ${D}${partial}: qkNormRope given the layer writes k and v to the cache, bit for bit as kv_write does (${kvCacheDtype})`, () => {
      const [blockSize, numBlocks] = [16, 160];
      const spec = { numBlocks, blockSize, numLayers: 2, numKvHeads: KV, headDim: D };
      cuda!.allocateKvCache(spec);
      cuda!.fillKvCache(0xff);
      const perm = shuffled(numBlocks, D + 1);
      const rope = { headDim: D, invFreq: defaultInvFreq(rot, 1e6) };
      const ids = (n: number) => Array.from({ length: n }, (_, i) => (i * 5) % 50);
      let used = 0;
      const seqs = [37, 200, 430, 1000, ...Array<number>(40).fill(4)].map((len) => {
        const pages = perm.slice(used, used += Math.ceil((len + 1) / blockSize));
        return { len, pages };
      });
      const decode = (n: number): Seq[] => seqs.slice(0, n).map(({ len, pages }) => ({ ids: ids(1), start: len, pages }));
      const steps: Seq[][] = [seqs.map(({ len, pages }) => ({ ids: ids(len), start: 0, pages })), decode(4), decode(44)];
      const scale = 1 / Math.sqrt(D);
      steps.forEach((stepSeqs, i) => {
        const batch = batchOf(stepSeqs, blockSize);
        const width = (H + 2 * KV) * D;
        const T = batch.numTokens;
        const data = randomBf16(T * width, 7 * D + i, -2, 2);
        const norm = cuda!.fromHost([D], randomBf16(D, 3 * D + i, 0.5, 1.5));
        const step = cuda!.beginStep(batch);
        const fusedBefore = cuda!.numFusedRopes;
        const fused = cuda!.fromHost([T, width], data);
        cuda!.qkNormRope(fused, norm, norm, 1e-6, H, KV, rope, step, 0);
        const outFused = cuda!.toHost(cuda!.attention(fused, 0, H, KV, scale, step));
        assert.equal(cuda!.numFusedRopes, fusedBefore + (i === 0 ? 0 : 1), `step ${i}: rope inside attention iff decode-only`);
        const plain = cuda!.fromHost([T, width], data);
        cuda!.qkNormRope(plain, norm, norm, 1e-6, H, KV, rope, step);
        const outPlain = cuda!.toHost(cuda!.attention(plain, 1, H, KV, scale, step));
        assert.ok(outFused.every(Number.isFinite), `step ${i}: an output read a slot that was never written`);
        assert.deepEqual(new Uint32Array(outFused.buffer), new Uint32Array(outPlain.buffer), `step ${i} (D=${D})`);
      });
      // the cache's bytes, read as bf16 pairs (an FP8 cache: two elements each)
      const cacheBits = (layer: number, which: 'k' | 'v') => new Uint32Array(cuda!.toHost(
        new CudaTensor([numBlocks * blockSize * KV, fp8 ? D / 2 : D], cuda!.kvLayer(layer)[which])).buffer);
      for (const which of ['k', 'v'] as const) {
        assert.deepEqual(cacheBits(0, which), cacheBits(1, which), `${which} cache: layer 0 (fused) vs layer 1 (D=${D})`);
      }
    });
  }
});
