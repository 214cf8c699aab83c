// Partial rotary (Qwen3.5: the first 64 channels of a 256-dim head turn, the rest pass through) on the CUDA backend
// against the CPU reference: qkNormRope in place, and given the layer, its KV-cache write and the attention that
// reads it, over a prompt step, a decode-only step (the rope inside the decode attention kernel) and a mixed step.

import { after, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import type { ForwardBatch } from '../../src/backend/batch.js';
import { CudaTensor } from '../../src/backend/cuda/cuda-backend.js';
import { defaultInvFreq } from '../../src/model/rope.js';
import { batchOf } from '../backend/helpers.js';
import { assertBf16Close, newCpu, newCuda, noCuda, randomBf16, uploadBoth } from './cuda-helpers.js';

describe('CUDA qkNormRope with partial rotary vs CPU', { skip: noCuda }, () => {
  const cpu = noCuda ? null : newCpu();
  const cuda = noCuda ? null : newCuda({ fusedRope: true });
  after(() => {
    cpu?.dispose();
    cuda?.dispose();
  });

  const [H, KV, blockSize, numBlocks] = [4, 2, 16, 12];
  const pagesA = [7, 2, 9];
  const pagesB = [4, 11];
  const ids = (n: number) => Array.from({ length: n }, (_, i) => (i * 7) % 50);
  const steps: { name: string; batch: ForwardBatch; fused: boolean }[] = [
    { name: 'prompt', fused: false, batch: batchOf([{ ids: ids(20), start: 0, pages: pagesA },
      { ids: ids(13), start: 0, pages: pagesB }], blockSize) },
    { name: 'decode-only', fused: true, batch: batchOf([{ ids: ids(1), start: 20, pages: pagesA },
      { ids: ids(1), start: 13, pages: pagesB }], blockSize) },
    { name: 'mixed', fused: false, batch: batchOf([{ ids: ids(5), start: 21, pages: pagesA },
      { ids: ids(1), start: 14, pages: pagesB }], blockSize) },
  ];

  // head dims 64 / 128 / 256 (one, two, four pairs a lane), a quarter and a half of each head rotated
  for (const D of [64, 128, 256]) for (const rot of [D / 4, D / 2]) for (const withNorm of [true, false]) {
    test(`head dim ${D}, ${rot} rotary channels, ${withNorm ? 'with' : 'without'} q/k norm: in place, the KV cache ` +
      'and attention, prompt, decode and mixed steps', () => {
      const spec = { numBlocks, blockSize, numLayers: 1, numKvHeads: KV, headDim: D };
      cpu!.allocateKvCache(spec);
      cuda!.allocateKvCache(spec);
      cuda!.fillKvCache(0xff);
      const rope = { headDim: D, invFreq: defaultInvFreq(rot, 1e7) };
      const width = (H + 2 * KV) * D;
      const [nqc, nqg] = uploadBoth(cpu!, cuda!, 'qn', [D], randomBf16(D, D + rot, 0.5, 1.5));
      const [nkc, nkg] = uploadBoth(cpu!, cuda!, 'kn', [D], randomBf16(D, D + rot + 1, 0.5, 1.5));
      const [qNormC, kNormC, qNormG, kNormG] = withNorm ? [nqc, nkc, nqg, nkg] : [null, null, null, null];
      const scale = 1 / Math.sqrt(D);
      steps.forEach(({ name, batch, fused }, i) => {
        const what = `${name} step, D ${D}, rot ${rot}${withNorm ? ', norm' : ''}`;
        const T = batch.numTokens;
        const data = randomBf16(T * width, 31 * D + rot + i, -2, 2);
        const [qc, inPlace] = uploadBoth(cpu!, cuda!, 'qkv', [T, width], data);
        const sc = cpu!.beginStep(batch);
        const sg = cuda!.beginStep(batch);
        cuda!.fillWorkspace(0xff);

        // in place, no cache: rope.cu's kernel whatever the step
        cuda!.qkNormRope(inPlace, qNormG, kNormG, 1e-6, H, KV, rope, sg);
        cpu!.qkNormRope(qc, qNormC, kNormC, 1e-6, H, KV, rope, sc);
        const roped = cpu!.toHost(qc);
        const out = cuda!.toHost(inPlace);
        assertBf16Close(out, roped, `qkNormRope (${what})`);
        for (let t = 0; t < T; t++) {
          const row = t * width;
          assert.deepEqual(out.subarray(row + (H + KV) * D, row + width), data.subarray(row + (H + KV) * D, row + width),
            `v untouched (${what})`);
          // without a norm the pass-through channels are the inputs, bit for bit (angle 0: cos 1, sin 0)
          if (!withNorm) {
            for (let h = 0; h < H + KV; h++) {
              const at = row + h * D;
              assert.deepEqual(out.subarray(at + rot, at + D), data.subarray(at + rot, at + D), `pass-through (${what})`);
            }
          }
        }

        // given the layer: the cache write (in rope.cu's kernel, or a decode-only step's in the decode kernel), then
        // attention over it
        const fusedBefore = cuda!.numFusedRopes;
        const qg = cuda!.fromHost([T, width], data);
        cuda!.qkNormRope(qg, qNormG, kNormG, 1e-6, H, KV, rope, sg, 0);
        const attnG = cuda!.toHost(cuda!.attention(qg, 0, H, KV, scale, sg));
        assert.equal(cuda!.numFusedRopes, fusedBefore + (fused ? 1 : 0), `rope inside attention iff decode-only (${what})`);
        assertBf16Close(attnG, cpu!.toHost(cpu!.attention(qc, 0, H, KV, scale, sc)), `attention (${what})`);
        const { k, v } = cuda!.kvLayer(0);
        const cacheOf = (p: bigint) => cuda!.toHost(new CudaTensor([numBlocks * blockSize * KV, D], p));
        const [kCache, vCache] = [cacheOf(k), cacheOf(v)];
        for (let t = 0; t < T; t++) {
          for (let h = 0; h < KV; h++) {
            const at = (batch.slotMapping[t]! * KV + h) * D;
            const kAt = t * width + (H + h) * D;
            const vAt = kAt + KV * D;
            assertBf16Close(kCache.subarray(at, at + D), roped.subarray(kAt, kAt + D), `k cache, token ${t} (${what})`);
            assert.deepEqual(vCache.subarray(at, at + D), data.subarray(vAt, vAt + D), `v cache, token ${t} (${what})`);
            if (!withNorm) {
              assert.deepEqual(kCache.subarray(at + rot, at + D), data.subarray(kAt + rot, kAt + D),
                `k cache pass-through, token ${t} (${what})`);
            }
          }
        }
      });
    });
  }
});
