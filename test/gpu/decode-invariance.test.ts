// Decode attention is batch-invariant: one row's output bits are the same
// alone, at any index of a batch of 16, 64, 200, 300 or 600 rows of other (different-length)
// rows, eager or replayed from a CUDA graph captured at another kv length, and
// beside a prompt chunk in a mixed step; and
// they match the CPU backend within bf16 tolerance for kv lengths 1 to 5000.
// The CUDA cache starts as NaN and the workspace is poisoned before every run. (Alone and in small batches the
// kernel serves one query head a block, from 200 rows the kv head's whole group, and at 600 rows (more than 8 blocks
// per SM) it is the kernel's build for 6 blocks per SM: the bits must not see it. At 200 rows the grid's z is 2, so
// the short row of 4 splits is walked by one block; at 16 and 64 its splits are published and merged.)

import { after, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { availableParallelism } from 'node:os';
import { f32ToBf16 } from '../../src/loader/dtype.js';
import { CpuBackend } from '../../src/backend/cpu/cpu-backend.js';
import type { CudaTensor } from '../../src/backend/cuda/cuda-backend.js';
import type { ForwardBatch } from '../../src/backend/batch.js';
import { batchOf, hostF32, shuffled } from '../backend/helpers.js';
import { assertBf16Close, newCuda, noCuda, randomBf16, rerunWith } from './cuda-helpers.js';
import { FOLD_BATCH, shortGraphRows } from '../../src/backend/cuda/decode-splits.js';

const [H, KV, D, blockSize] = [4, 2, 128, 16];
const width = (H + 2 * KV) * D;
const scale = 1 / Math.sqrt(D);
const kvLens = [1, 31, 200, 400, 1500, 5000];
const numTargetPages = 320;
const otherLens = Array.from({ length: 63 }, (_, i) => 1 + ((i * 7919 + 11) % 2600));

interface Row {
  len: number;
  pages: number[];
}

function decodeBatch(rows: Row[]): ForwardBatch {
  return batchOf(rows.map((r, i) => ({ ids: [i % 50], start: r.len - 1,
    pages: r.pages.slice(0, Math.floor((r.len - 1) / blockSize) + 1) })), blockSize);
}

function rowBits(out: Float32Array, row: number): Uint32Array {
  return new Uint32Array(out.slice(row * H * D, (row + 1) * H * D).buffer);
}

function assertAllFinite(out: Float32Array, what: string): void {
  const i = out.findIndex((x) => !Number.isFinite(x));
  assert.equal(i, -1, `${what}: element ${i} never written`);
}

describe('CUDA decode attention batch invariance', { skip: noCuda }, () => {
  const cpu = noCuda ? null : new CpuBackend({ kvCacheBytes: 64 << 20, numThreads: Math.min(8, availableParallelism()) });
  const cuda = noCuda ? null : newCuda();
  after(() => {
    cpu?.dispose();
    cuda?.dispose();
  });

  /** The md5 of the test below's eager outputs of determined bits (its diagnostic "decode md5"): a fold batch's bits. */
  let outputMd5 = '';

  test('a row is bit-identical alone, in batches of 16 to 600, eager and graphed; close to the CPU', (t) => {
    const hash = createHash('md5');
    const perm = shuffled(numTargetPages, 11);
    const target: Row = { len: 0, pages: perm.slice(0, Math.ceil(Math.max(...kvLens) / blockSize)) };
    let nextPage = numTargetPages;
    const others: Row[] = otherLens.map((len) => {
      const pages = Array.from({ length: Math.ceil(len / blockSize) }, (_, i) => nextPage + i);
      nextPage += pages.length;
      return { len, pages };
    });
    cpu!.allocateKvCache({ numBlocks: numTargetPages, blockSize, numLayers: 1, numKvHeads: KV, headDim: D });
    const promptPages = Array.from({ length: 7 }, (_, i) => nextPage + i);  // a 100-token prompt chunk's
    cuda!.allocateKvCache({ numBlocks: nextPage + promptPages.length, blockSize, numLayers: 1, numKvHeads: KV, headDim: D });
    cuda!.fillKvCache(0xff);
    cuda!.device.synchronize();
    const pageElements = blockSize * KV * D;
    const otherElements = (nextPage - numTargetPages) * pageElements;
    const { k, v } = cuda!.kvLayer(0);
    const firstOther = BigInt(numTargetPages * pageElements * 2);
    cuda!.device.upload(k + firstOther, f32ToBf16(randomBf16(otherElements, 21, -2, 2)));
    cuda!.device.upload(v + firstOther, f32ToBf16(randomBf16(otherElements, 22, -2, 2)));

    // The target's history, positions [0, 4999), through each backend's own prefill path.
    const numHistory = Math.max(...kvLens) - 1;
    const history = batchOf([{ ids: Array.from({ length: numHistory }, (_, i) => i % 50), start: 0, pages: target.pages }],
      blockSize);
    const historyQkv = randomBf16(numHistory * width, 23, -2, 2);
    cpu!.attention(cpu!.upload(hostF32('qkv', [numHistory, width], historyQkv)), 0, H, KV, scale, cpu!.beginStep(history));
    const historyStep = cuda!.beginStep(history);
    cuda!.attention(cuda!.fromHost([numHistory, width], historyQkv), 0, H, KV, scale, historyStep);

    cuda!.reserveStepCapacity(640, 640, target.pages.length);
    // Fixed qkv buffers per batch size, rewritten before each run, so a replayed graph reads the new rows.
    const qkvOf = new Map<number, CudaTensor>();
    const qkvFor = (numRows: number, values: Float32Array): CudaTensor => {
      let t = qkvOf.get(numRows);
      if (!t) qkvOf.set(numRows, t = cuda!.fromHost([numRows, width], values));
      else cuda!.device.upload(t.ptr, f32ToBf16(values));
      return t;
    };
    const eager = (batch: ForwardBatch, qkv: CudaTensor): Float32Array => {
      const step = cuda!.beginStep(batch);
      cuda!.fillWorkspace(0xff);
      return cuda!.toHost(cuda!.attention(qkv, 0, H, KV, scale, step));
    };

    const captured = new Set<string>();
    kvLens.forEach((len, li) => {
      target.len = len;
      const targetQkv = randomBf16(width, 100 + li, -2, 2);
      const alone = decodeBatch([target]);
      const cpuOut = cpu!.toHost(cpu!.attention(cpu!.upload(hostF32('qkv', [1, width], targetQkv)), 0, H, KV, scale, cpu!.beginStep(alone)));
      const aloneOut = eager(alone, qkvFor(1, targetQkv));
      assertBf16Close(aloneOut, cpuOut, `kv length ${len} vs CPU`);
      const want = rowBits(aloneOut, 0);
      hash.update(new Uint32Array(aloneOut.buffer));

      for (const [numRows, at] of [[16, 5], [64, 37], [200, 99], [300, 151], [600, 433]] as const) {
        // 300 and 600 rows fill the GPU with one block per row (grid z 1): a block merges its own splits
        const rows = Array.from({ length: numRows - 1 }, (_, i) => others[i % others.length]!);
        rows.splice(at, 0, target);
        const batch = decodeBatch(rows);
        const qkv = randomBf16(numRows * width, 1000 * numRows + li, -2, 2);
        qkv.set(targetQkv, at * width);
        const batchOut = eager(batch, qkvFor(numRows, qkv));
        assertAllFinite(batchOut, `batch ${numRows}, kv length ${len}`);
        // every row where the rows are distinct; past 64 rows others repeat, their new K/V racing for one slot
        hash.update(numRows - 1 <= others.length ? new Uint32Array(batchOut.buffer) : rowBits(batchOut, at));
        assert.deepEqual(rowBits(batchOut, at), want, `kv length ${len}: row ${at} of a batch of ${numRows} differs from alone`);

        // a graph per (bucket, kv class): batch 16's rows are all of the short class (<= 2,048) until the target's 5,000
        const graphKey = `${numRows} ${shortGraphRows(batch.positions)}`;
        const numReplays = cuda!.numGraphReplays;
        const buffer = qkvFor(numRows, qkv);
        const graphed = cuda!.graph(numRows, batch, () => {
          const step = cuda!.beginStep(batch);
          cuda!.fillWorkspace(0xff);
          return cuda!.toHost(cuda!.attention(buffer, 0, H, KV, scale, step));
        });
        assert.equal(cuda!.numGraphReplays, numReplays + (captured.has(graphKey) ? 1 : 0),
          `batch ${numRows}: replayed, not recaptured`);
        captured.add(graphKey);
        assertAllFinite(graphed, `graph of ${numRows}, kv length ${len}`);
        assert.deepEqual(rowBits(graphed, at), want, `kv length ${len}: graph of ${numRows} differs from alone`);
      }

      // a mixed step: a 100-token prompt chunk, then the target and another decode row (the decode kernel's)
      const other = others[3]!;
      const mixed = batchOf([{ ids: Array.from({ length: 100 }, (_, i) => i % 50), start: 0, pages: promptPages },
        { ids: [1], start: len - 1, pages: target.pages.slice(0, Math.floor((len - 1) / blockSize) + 1) },
        { ids: [2], start: other.len - 1, pages: other.pages }], blockSize);
      const mixedQkv = randomBf16(102 * width, 7000 + li, -2, 2);
      mixedQkv.set(targetQkv, 100 * width);
      const mixedOut = eager(mixed, cuda!.fromHost([102, width], mixedQkv));
      assertAllFinite(mixedOut, `mixed step, kv length ${len}`);
      hash.update(new Uint32Array(mixedOut.buffer));
      assert.deepEqual(rowBits(mixedOut, 100), want, `kv length ${len}: the row in a mixed step differs from alone`);
    });
    assert.equal(cuda!.numGraphs, captured.size, 'a graph per (bucket, kv class): batch 16 has two');
    assert.equal(captured.size, 6);
    outputMd5 = hash.digest('hex');
    t.diagnostic(`decode md5 ${outputMd5}`);
  });

  // The merge of published splits reads them in batches (QUIRE_DECODE_FOLD_BATCH, a kernel #define): this file again
  // in a process built with the other batch (1 against the default 8), where the walked and the merged rows must still
  // agree bit for bit, and every output must have this process's bits.
  const otherFold = FOLD_BATCH === 1 ? '8' : '1';
  test(`the same, with published split states read ${otherFold} at a time: the same bits`,
    { skip: process.env.QUIRE_DECODE_FOLD_BATCH !== undefined ? 'the child run (or the knob set by hand)' : false }, () => {
      const out = rerunWith(import.meta.url, { QUIRE_DECODE_FOLD_BATCH: otherFold }, 'bit-identical alone');
      assert.match(out, /^\S* ?pass [1-9]/m, 'the child ran its tests');
      assert.match(outputMd5, /^[0-9a-f]{32}$/, 'this process ran the test above');
      assert.equal(/decode md5 ([0-9a-f]{32})/.exec(out)?.[1], outputMd5);
    });
});
