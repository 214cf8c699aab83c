// Prefill attention against the CPU reference: head dims 64/128/256, GQA
// ratios 1/2/4/8, six sequences of mixed lengths in one batch (tiles of one
// row, partial tiles, several tiles), a second chunk starting at position 300
// over context already in the cache, pages of 16 and 32 scattered over the
// pool. The KV cache and the output start as NaN, so a read of an unwritten
// slot or an unwritten output element shows.

import { after, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import type { ForwardBatch } from '../../src/backend/batch.js';
import { prefillDigests } from '../../src/lab/bench-prefill.js';
import { PrefillHarness, prefillFlops } from '../../src/lab/prefill-harness.js';
import { batchOf, shuffled } from '../backend/helpers.js';
import { assertBf16Close, newCpu, newCuda, noCuda, randomBf16, uploadBoth } from './cuda-helpers.js';

interface Seq {
  ids: number[];
  start: number;
  pages: number[];
}

const ids = (n: number): number[] => Array.from({ length: n }, (_, i) => (i * 7) % 50);
const MIXED_LENGTHS = [1, 15, 64, 65, 200, 700];
const CHUNK_START = 300;

/** Step 1: the mixed prompts and the first CHUNK_START tokens of one more; step 2: that one's next chunk. */
function chunkedSteps(numBlocks: number, blockSize: number, seed: number): Seq[][] {
  const perm = shuffled(numBlocks, seed);
  let next = 0;
  const take = (numTokens: number) => perm.slice(next, (next += Math.ceil(numTokens / blockSize)));
  const mixed = MIXED_LENGTHS.map((n) => ({ ids: ids(n), start: 0, pages: take(n) }));
  const chunkedPages = take(CHUNK_START + 200);
  const decodePages = take(40);
  return [
    [...mixed, { ids: ids(CHUNK_START), start: 0, pages: chunkedPages }, { ids: ids(39), start: 0, pages: decodePages }],
    [{ ids: ids(1), start: 39, pages: decodePages }, { ids: ids(200), start: CHUNK_START, pages: chunkedPages }],
  ];
}

function numPagesNeeded(blockSize: number): number {
  return [...MIXED_LENGTHS, CHUNK_START + 200, 40].reduce((n, len) => n + Math.ceil(len / blockSize), 0);
}

describe('CUDA prefill attention (tensor cores) vs CPU', { skip: noCuda }, () => {
  const cpu = noCuda ? null : newCpu();
  const cuda = noCuda ? null : newCuda();
  after(() => {
    cpu?.dispose();
    cuda?.dispose();
  });

  for (const D of [64, 128, 256]) {
    test(`head dim ${D}: GQA 1/2/4/8, mixed lengths, chunked prefill at ${CHUNK_START}, pages of 16 and 32`, () => {
      for (const [ratio, blockSize] of [[1, 16], [2, 32], [4, 16], [8, 32]] as const) {
        const H = 8;
        const KV = H / ratio;
        const numBlocks = numPagesNeeded(blockSize) + 7;
        const spec = { numBlocks, blockSize, numLayers: 1, numKvHeads: KV, headDim: D };
        cpu!.allocateKvCache(spec);
        cuda!.allocateKvCache(spec);
        cuda!.fillKvCache(0xff);
        chunkedSteps(numBlocks, blockSize, D + ratio).forEach((seqs, i) => {
          const batch: ForwardBatch = batchOf(seqs, blockSize);
          const width = (H + 2 * KV) * D;
          const T = batch.numTokens;
          const [qc, qg] = uploadBoth(cpu!, cuda!, 'qkv', [T, width], randomBf16(T * width, 1000 * D + 10 * ratio + i, -2, 2));
          const sc = cpu!.beginStep(batch);
          const sg = cuda!.beginStep(batch);
          cuda!.fillWorkspace(0xff);
          const scale = 1 / Math.sqrt(D);
          const outG = cuda!.toHost(cuda!.attention(qg, 0, H, KV, scale, sg));
          const outC = cpu!.toHost(cpu!.attention(qc, 0, H, KV, scale, sc));
          assertBf16Close(outG, outC, `step ${i + 1} (D=${D}, GQA ${ratio}, pages of ${blockSize})`);
        });
      }
    });
  }
});

describe('tensor-core prefill: heads a block change no bit', { skip: noCuda }, () => {
  const cuda = noCuda ? null : newCuda();
  after(() => cuda?.dispose());

  // two or four heads of a kv head a block, Q in shared memory, against a head a block: each row's arithmetic is the same
  for (const [ratio, suffix] of [[2, ''], [4, ''], [4, '_h4'], [8, '_h4']] as const) {
    test(`head dim 128, GQA ${ratio}: attention_prefill_bf16_d128${suffix} equals ..._h1 bit for bit`, () => {
      const [H, D, blockSize] = [8, 128, 16];
      const KV = H / ratio;
      const numBlocks = numPagesNeeded(blockSize) + 5;
      const batch = batchOf(chunkedSteps(numBlocks, blockSize, 31 + ratio)[0]!, blockSize);
      const h = new PrefillHarness(cuda!.device, batch, { numHeads: H, numKvHeads: KV, headDim: D, blockSize, numBlocks });
      try {
        const scale = 1 / Math.sqrt(D);
        h.uploadQkvRows(0, randomBf16(batch.numTokens * (H + 2 * KV) * D, 50 + ratio, -3, 3));
        h.writeKv();
        h.poisonOut();
        h.run(scale, '_h1');
        const one = h.readOut();
        h.poisonOut();
        h.run(scale, suffix);
        const shared = h.readOut();
        let differ = 0;
        for (let i = 0; i < one.length; i++) if (!Object.is(one[i], shared[i])) differ++;
        assert.equal(differ, 0, `${differ} of ${one.length} outputs differ`);
        // rows of prompts (one-token rows are the decode kernel's) all written
        const width = H * D;
        for (let q = 0; q < batch.numSeqs; q++) {
          const [from, to] = [batch.queryStartLoc[q]!, batch.queryStartLoc[q + 1]!];
          if (to - from < 2) continue;
          assert.ok(one.subarray(from * width, to * width).every((x) => Number.isFinite(x)), `sequence ${q} written`);
        }
      } finally {
        h.dispose();
      }
    });
  }
});

// Written on the H100 (sm_90) by session 13's device runs for cb370c5's kernel and 6c24f46's alike (the same
// computation as `node dist/src/lab/bench-prefill.js --digest`). A change to the kernel that alters any
// output bit fails here, where the demo transcripts' md5 would only notice a flipped token; a deliberate one
// records the new digests with its perf-log entry.
const SM90_DIGESTS = ['1db3497a9a4e26f1', '6d26f9b35e37992a', '56a8282b269b67f7', 'fb6ba83764e6ceea'];

test('the prefill kernel\'s bits on the digest batches are the recorded ones (sm_90)', { skip: noCuda }, (t) => {
  const cuda = newCuda();
  try {
    if (cuda.device.arch !== 90) {
      t.skip(`digests recorded on sm_90, this is sm_${cuda.device.arch}`);
      return;
    }
    assert.deepEqual(prefillDigests(cuda.device), SM90_DIGESTS);
  } finally {
    cuda.dispose();
  }
});

test('prefillFlops counts each row\'s visible keys', () => {
  const batch = batchOf([{ ids: ids(3), start: 0, pages: [0] }, { ids: ids(2), start: 10, pages: [1] }], 16);
  assert.equal(prefillFlops(batch, 2, 4), 4 * (1 + 2 + 3 + 11 + 12) * 2 * 4);
});
