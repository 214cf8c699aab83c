import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { CpuBackend } from '../../src/backend/cpu/cpu-backend.js';
import { assertClose, batchOf, hostF32, randomArray, shuffled } from './helpers.js';

const backends = { js: new CpuBackend({ kvCacheBytes: 1 << 22, numThreads: 1, kernel: 'js' }),
  wasm: new CpuBackend({ kvCacheBytes: 1 << 22, numThreads: 1, kernel: 'wasm' }),
  'wasm, 2 threads': new CpuBackend({ kvCacheBytes: 1 << 22, numThreads: 2, kernel: 'wasm' }) };
after(() => Object.values(backends).forEach((b) => b.dispose()));

const [H, D, blockSize, numBlocks] = [4, 8, 4, 32];

/** Dense causal attention of one sequence: rows [len][(H + 2 KVH) D] -> out [len][H D]. */
function denseCausal(rows: Float32Array[], KVH: number, scale: number): number[][] {
  return rows.map((row, p) => {
    const out: number[] = [];
    for (let h = 0; h < H; h++) {
      const kvh = Math.floor(h / (H / KVH));
      const scores: number[] = [];
      for (let j = 0; j <= p; j++) {
        let dot = 0;
        for (let d = 0; d < D; d++) dot += row[h * D + d]! * rows[j]![(H + kvh) * D + d]!;
        scores.push(dot * scale);
      }
      const m = Math.max(...scores);
      const e = scores.map((s) => Math.exp(s - m));
      const z = e.reduce((a, b) => a + b, 0);
      for (let d = 0; d < D; d++) {
        let acc = 0;
        for (let j = 0; j <= p; j++) acc += e[j]! * rows[j]![(H + KVH + kvh) * D + d]!;
        out.push(acc / z);
      }
    }
    return out;
  });
}

for (const [KVH, kernel] of [1, 2, 4].flatMap((n) => (['js', 'wasm', 'wasm, 2 threads'] as const).map((k) => [n, k] as const))) {
  test(`${kernel}: paged attention over scrambled pages equals dense causal attention (H=${H}, KVH=${KVH}), across chunked steps`, () => {
    const backend = backends[kernel];
    const width = (H + 2 * KVH) * D;
    const scale = 1 / Math.sqrt(D);
    backend.allocateKvCache({ numBlocks, blockSize, numLayers: 2, numKvHeads: KVH, headDim: D });
    const seqLens = [13, 6, 9];
    const pageIds = shuffled(numBlocks, KVH);
    const pages = seqLens.map((len, i) => pageIds.slice(i * 4, i * 4 + Math.ceil(len / blockSize)));
    const rows = seqLens.map((len, i) => Array.from({ length: len }, (_, p) => randomArray(width, 100 * i + p + KVH * 1000, -2, 2)));
    const expected = rows.map((r) => denseCausal(r, KVH, scale));
    const steps = [
      [{ seq: 0, start: 0, end: 8 }, { seq: 1, start: 0, end: 6 }, { seq: 2, start: 0, end: 1 }],
      [{ seq: 2, start: 1, end: 9 }, { seq: 0, start: 8, end: 13 }],
    ];
    for (const plan of steps) {
      const step = backend.beginStep(batchOf(plan.map((c) => ({ ids: new Array(c.end - c.start).fill(0),
        start: c.start, pages: pages[c.seq]! })), blockSize));
      const qkvValues = plan.flatMap((c) => rows[c.seq]!.slice(c.start, c.end).flatMap((r) => [...r]));
      const numTokens = qkvValues.length / width;
      const qkv = backend.upload(hostF32('qkv', [numTokens, width], Float32Array.from(qkvValues)));
      const out = backend.attention(qkv, 1, H, KVH, scale, step);
      assert.deepEqual(out.shape, [numTokens, H * D]);
      const want = plan.flatMap((c) => expected[c.seq]!.slice(c.start, c.end).flat());
      assertClose(backend.toHost(out), want, 1e-5, `KVH=${KVH}`);
    }
  });
}

for (const kernel of ['js', 'wasm'] as const) test(`${kernel}: a token whose slot is -1 writes nothing to the cache`, () => {
  const backend = backends[kernel];
  const KVH = 2;
  const width = (H + 2 * KVH) * D;
  backend.allocateKvCache({ numBlocks, blockSize, numLayers: 1, numKvHeads: KVH, headDim: D });
  const first = randomArray(width, 1);
  const second = randomArray(width, 2);
  const step1 = backend.beginStep(batchOf([{ ids: [0], start: 0, pages: [7] }], blockSize));
  backend.attention(backend.upload(hostF32('a', [1, width], first)), 0, H, KVH, 0.3, step1);
  const batch = batchOf([{ ids: [0], start: 0, pages: [7] }], blockSize);
  batch.slotMapping[0] = -1;
  const step2 = backend.beginStep(batch);
  const out = backend.toHost(backend.attention(backend.upload(hostF32('b', [1, width], second)), 0, H, KVH, 0.3, step2));
  const vOff = (H + KVH) * D;
  const expected = Array.from({ length: H }, (_, h) => [...first.subarray(vOff + Math.floor(h / 2) * D, vOff + Math.floor(h / 2) * D + D)]).flat();
  assertClose(out, expected, 1e-6, 'cached v');
});

test('wasm attention split across two threads equals the single-thread result bit for bit', () => {
  const [KVH, D2] = [2, 32];
  const width = (H + 2 * KVH) * D2;
  const run = (backend: CpuBackend): Float32Array => {
    backend.allocateKvCache({ numBlocks: 128, blockSize, numLayers: 1, numKvHeads: KVH, headDim: D2 });
    const pageIds = shuffled(128, 3);
    const step = backend.beginStep(batchOf([
      { ids: new Array(200).fill(0), start: 0, pages: pageIds.slice(0, 50) },
      { ids: new Array(150).fill(0), start: 0, pages: pageIds.slice(50, 88) },
    ], blockSize));
    const qkv = backend.upload(hostF32('qkv', [350, width], randomArray(350 * width, 17, -2, 2)));
    return backend.toHost(backend.attention(qkv, 0, H, KVH, 0.2, step));
  };
  const single = run(backends.wasm);
  assert.deepEqual(run(backends['wasm, 2 threads']), single);
  assert.ok(single.every((v) => Number.isFinite(v)) && single.some((v) => v !== 0));
});
