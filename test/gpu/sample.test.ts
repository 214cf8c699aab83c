// GPU sampling (kernels/sample.cu) against its reference (sampleRowsReference,
// what the CPU backend runs): the same token for every row, greedy and seeded
// top-k / top-p / min-p, with ties, -Infinity and NaN logits, at the real vocab width.

import { after, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import type { RowSampling } from '../../src/backend/batch.js';
import { rowLogprobsReference, sampleRowsReference } from '../../src/backend/sampling/reference.js';
import { seededRandom } from '../../src/model/random-weights.js';
import { batchOf } from '../backend/helpers.js';
import { newCuda, noCuda, randomBf16 } from './cuda-helpers.js';
import type { CudaBackend } from '../../src/backend/cuda/cuda-backend.js';

function rowSampling(numRows: number, seed: number): RowSampling {
  const rand = seededRandom(seed);
  const s: RowSampling = { temperature: new Float32Array(numRows), topK: new Int32Array(numRows),
    topP: new Float32Array(numRows).fill(1), minP: new Float32Array(numRows), uniform: new Float32Array(numRows) };
  for (let r = 0; r < numRows; r++) {
    const kind = r % 6;
    s.temperature[r] = kind === 0 ? 0 : [0.25, 0.7, 1, 1.5][r % 4]!;
    if (kind === 2 || kind === 5) s.topK[r] = [1, 5, 40, 1000][r % 4]!;
    if (kind === 3 || kind === 5) s.topP[r] = [0.1, 0.5, 0.9, 0.95][r % 4]!;
    if (kind === 4 || kind === 5) s.minP[r] = [0.01, 0.05, 0.2][r % 3]!;
    s.uniform[r] = Math.fround(rand());
  }
  return s;
}

describe('GPU sampling', { skip: noCuda }, () => {
  const backends: CudaBackend[] = [];
  after(() => backends.forEach((b) => b.dispose()));

  function sampleOnGpu(cuda: CudaBackend, values: Float32Array, numRows: number, vocab: number,
    sampling: RowSampling | undefined): Int32Array {
    const logits = cuda.fromHost([numRows, vocab], values);
    const batch = batchOf(Array.from({ length: numRows }, (_, r) => ({ ids: [r], start: 0, pages: [1] })), 16,
      Array.from({ length: numRows }, (_, r) => r));
    if (sampling) batch.sampling = sampling;
    return cuda.sampleTokens(logits, cuda.beginStep(batch));
  }

  for (const [vocab, numRows, scale] of [[151936, 12, 8], [1000, 96, 3], [50, 36, 1]] as const) {
    test(`vocab ${vocab}, ${numRows} rows: the reference's token for every row`, () => {
      const cuda = newCuda();
      backends.push(cuda);
      const values = randomBf16(numRows * vocab, vocab + numRows, -scale, scale);
      for (let i = 0; i < Math.min(vocab, 64); i++) values[vocab + i] = scale; // 64 tied maxima in row 1
      values[2 * vocab + 7] = Number.NaN;
      for (let i = 0; i < vocab; i += 3) values[3 * vocab + i] = -Infinity;
      const sampling = rowSampling(numRows, vocab);
      const expected = sampleRowsReference(values, vocab, numRows, sampling);
      const actual = sampleOnGpu(cuda, values, numRows, vocab, sampling);
      assert.deepEqual([...actual], [...expected]);
      const again = sampleOnGpu(cuda, values, numRows, vocab, sampling);
      assert.deepEqual([...again], [...actual], 'deterministic');
      const greedy = sampleOnGpu(cuda, values, numRows, vocab, undefined);
      assert.deepEqual([...greedy], [...sampleRowsReference(values, vocab, numRows, undefined)]);
      assert.equal(greedy[1], 0, 'ties to the lowest id');
    });
  }

  test('many uniforms on one row follow the reference distribution exactly', () => {
    const cuda = newCuda();
    backends.push(cuda);
    const vocab = 4096;
    const numRows = 64;
    const base = randomBf16(vocab, 77, -4, 4);
    const values = new Float32Array(numRows * vocab);
    for (let r = 0; r < numRows; r++) values.set(base, r * vocab);
    const sampling = rowSampling(numRows, 5);
    sampling.temperature.fill(0.8);
    sampling.topK.fill(100);
    sampling.topP.fill(0.9);
    sampling.minP.fill(0);
    for (let r = 0; r < numRows; r++) sampling.uniform[r] = Math.fround((r + 0.5) / numRows);
    assert.deepEqual([...sampleOnGpu(cuda, values, numRows, vocab, sampling)],
      [...sampleRowsReference(values, vocab, numRows, sampling)]);
  });

  for (const [vocab, numTop] of [[151936, 5], [1000, 20], [50, 0]] as const) {
    test(`prompt logprobs (row_logprobs), vocab ${vocab}, top ${numTop}: the reference's ranks and ids, its logprobs to 1e-5`, () => {
      const cuda = newCuda();
      backends.push(cuda);
      const numRows = 10;
      const first = 3;
      const values = randomBf16((first + numRows) * vocab, vocab + 9, -6, 6);
      for (let i = 0; i < Math.min(vocab, 64); i++) values[(first + 1) * vocab + i] = 6;  // tied maxima
      for (let i = 0; i < vocab; i += 3) values[(first + 2) * vocab + i] = -Infinity;
      const targets = Int32Array.from({ length: numRows }, (_, r) => ([0, 5, 3, vocab - 1][r % 4]! + (r > 4 ? 7 : 0)) % vocab);
      const logits = cuda.fromHost([first + numRows, vocab], values);
      cuda.beginStep(batchOf([{ ids: [1], start: 0, pages: [1] }], 16, [0]));
      const got = cuda.rowLogprobs(logits, first, targets, numTop);
      const want = rowLogprobsReference(values.subarray(first * vocab), vocab, targets, numTop);
      const width = 2 + 2 * numTop;
      const gf = new Float32Array(got.buffer, got.byteOffset, got.length);
      const wf = new Float32Array(want.buffer);
      for (let r = 0; r < numRows; r++) {
        for (let c = 0; c < width; c++) {
          const at = r * width + c;
          const isFloat = c === 0 || (c >= 2 && c % 2 === 1);
          if (!isFloat) assert.equal(got[at], want[at], `row ${r} column ${c}`);
          else if (gf[at] !== wf[at]) assert.ok(Math.abs(gf[at]! - wf[at]!) < 1e-5, `row ${r} column ${c}: ${gf[at]} vs ${wf[at]}`);
        }
      }
      const rows = cuda.toHostRows(logits, first + 1, 2);
      assert.deepEqual([...rows], [...values.subarray((first + 1) * vocab, (first + 3) * vocab)]);
    });
  }
});
