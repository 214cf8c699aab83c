import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { CpuBackend, CpuTensor } from '../../src/backend/cpu/cpu-backend.js';
import { WasmHeap } from '../../src/backend/cpu/heap.js';
import { bf16ToF32, f32ToBf16, f32ToBytes } from '../../src/loader/dtype.js';
import { rotateHalf } from '../../src/model/rope.js';
import { assertClose, batchOf, hostF32, randomArray } from './helpers.js';

const backend = new CpuBackend({ kvCacheBytes: 1 << 20, numThreads: 1 });
const kernels = ['js', 'wasm'] as const;
const single = { js: new CpuBackend({ kvCacheBytes: 0, numThreads: 1, kernel: 'js' }),
  wasm: new CpuBackend({ kvCacheBytes: 0, numThreads: 1, kernel: 'wasm' }) };
const threaded = { js: new CpuBackend({ kvCacheBytes: 0, numThreads: 2, kernel: 'js' }),
  wasm: new CpuBackend({ kvCacheBytes: 0, numThreads: 2, kernel: 'wasm' }) };
after(() => [backend, ...Object.values(single), ...Object.values(threaded)].forEach((b) => b.dispose()));

/** 'js' kernel order: one double accumulator, k = 0..K-1. */
function naiveMatmul(x: Float32Array, w: Float32Array, T: number, K: number, N: number): Float32Array {
  const y = new Float32Array(T * N);
  for (let t = 0; t < T; t++) {
    for (let n = 0; n < N; n++) {
      let s = 0;
      for (let k = 0; k < K; k++) s += x[t * K + k]! * w[n * K + k]!;
      y[t * N + n] = s;
    }
  }
  return y;
}

/** 'wasm' kernel order: f32 lanes k mod 4 over K & ~3, (l0 + l1) + (l2 + l3), then the tail in order. */
function laneMatmul(x: Float32Array, w: Float32Array, T: number, K: number, N: number): Float32Array {
  const fr = Math.fround;
  const y = new Float32Array(T * N);
  const k4 = K & ~3;
  for (let t = 0; t < T; t++) {
    for (let n = 0; n < N; n++) {
      const lane = [0, 0, 0, 0];
      for (let k = 0; k < k4; k++) lane[k & 3] = fr(lane[k & 3]! + fr(x[t * K + k]! * w[n * K + k]!));
      let s = fr(fr(lane[0]! + lane[1]!) + fr(lane[2]! + lane[3]!));
      for (let k = k4; k < K; k++) s = fr(s + fr(x[t * K + k]! * w[n * K + k]!));
      y[t * N + n] = s;
    }
  }
  return y;
}

const reference = { js: naiveMatmul, wasm: laneMatmul };

function data(t: unknown): Float32Array {
  return (t as CpuTensor).data;
}

for (const kernel of kernels) {
  test(`${kernel} matmul equals its reference summation order bit for bit, for every tile remainder`, () => {
    const b = single[kernel];
    assert.equal(b.kernel, kernel);
    for (const T of [1, 3, 4, 5, 9]) {
      for (const N of [1, 7, 8, 13, 33]) {
        for (const K of [1, 5, 8, 64, 67]) {
          const x = randomArray(T * K, T * 1000 + N * 10 + K);
          const w = randomArray(N * K, T + N * 77 + K * 5);
          b.beginStep(batchOf([{ ids: [0], start: 0, pages: [0] }], 4));
          const y = b.matmul(b.upload(hostF32('x', [T, K], x)), b.upload(hostF32('w', [N, K], w)));
          assert.deepEqual(y.shape, [T, N]);
          assert.deepEqual(data(y), reference[kernel](x, w, T, K, N), `T=${T} N=${N} K=${K}`);
        }
      }
    }
  });

  test(`${kernel} matmul split across two threads equals the reference bit for bit`, () => {
    const [T, K, N] = [5, 256, 300];
    const x = randomArray(T * K, 1);
    const w = randomArray(N * K, 2);
    const b = threaded[kernel];
    b.beginStep(batchOf([{ ids: [0], start: 0, pages: [0] }], 4));
    const y = b.matmul(b.upload(hostF32('x', [T, K], x)), b.upload(hostF32('w', [N, K], w)));
    assert.equal(b.numThreads, 2);
    assert.deepEqual(b.toHost(y), reference[kernel](x, w, T, K, N));
  });
}

test('upload converts bf16 and f16 to f32 (bf16 2-D weights stay bf16 under wasm; toHost widens them)', () => {
  const values = randomArray(24, 3);
  const bf16Values = bf16ToF32(f32ToBf16(values));
  for (const kernel of kernels) {
    const b = single[kernel];
    const t = b.upload({ name: 'w', dtype: 'bf16', shape: [4, 6], data: f32ToBytes('bf16', values) });
    assert.equal((t as CpuTensor).dtype, kernel === 'wasm' ? 'bf16' : 'f32');
    assert.deepEqual(b.toHost(t), bf16Values);
    const flat = b.upload({ name: 'n', dtype: 'bf16', shape: [24], data: f32ToBytes('bf16', values) });
    assert.deepEqual(data(flat), bf16Values);
    const half = b.upload({ name: 'w', dtype: 'f16', shape: [4, 6], data: f32ToBytes('f16', values) });
    assertClose(data(half), values, 1 / 1024, 'f16');
    const bytes = f32ToBytes('bf16', values);
    const odd = new Uint8Array(bytes.length + 1);
    odd.set(bytes, 1);
    assert.deepEqual(data(b.upload({ name: 'n', dtype: 'bf16', shape: [24], data: odd.subarray(1) })), bf16Values);
    assert.throws(() => b.upload({ name: 'w', dtype: 'bf16', shape: [4, 6], data: new Uint8Array(10) }), /w/);
  }
});

test('wasm matmul with bf16 weights equals the f32 kernel on the widened weights, bit for bit, on 1 and 2 threads', () => {
  for (const [T, K, N] of [[1, 67, 13], [6, 77, 10], [9, 64, 33], [5, 256, 300]] as const) {
    const x = randomArray(T * K, T + K);
    const w = bf16ToF32(f32ToBf16(randomArray(N * K, N + K)));
    const expected = laneMatmul(x, w, T, K, N);
    for (const b of [single.wasm, threaded.wasm]) {
      b.beginStep(batchOf([{ ids: [0], start: 0, pages: [0] }], 4));
      const wt = b.upload({ name: 'w', dtype: 'bf16', shape: [N, K], data: f32ToBytes('bf16', w) });
      assert.equal((wt as CpuTensor).dtype, 'bf16');
      assert.deepEqual(b.toHost(b.matmul(b.upload(hostF32('x', [T, K], x)), wt)), expected, `T=${T} K=${K} N=${N}`);
    }
  }
});

function naiveRmsNorm(x: Float32Array, w: Float32Array, T: number, H: number, eps: number): number[] {
  const out: number[] = [];
  for (let t = 0; t < T; t++) {
    const row = x.subarray(t * H, (t + 1) * H);
    const ms = row.reduce((s, v) => s + v * v, 0) / H;
    for (let i = 0; i < H; i++) out.push((row[i]! / Math.sqrt(ms + eps)) * w[i]!);
  }
  return out;
}

test('rmsNorm and addRmsNorm match the naive formula; addRmsNorm updates the residual', () => {
  const [T, H, eps] = [3, 40, 1e-5];
  const x = randomArray(T * H, 4);
  const r = randomArray(T * H, 5);
  const w = randomArray(H, 6, 0.5, 1.5);
  backend.beginStep(batchOf([{ ids: [0], start: 0, pages: [0] }], 4));
  const wt = backend.upload(hostF32('w', [H], w));
  assertClose(data(backend.rmsNorm(backend.upload(hostF32('x', [T, H], x)), wt, eps)), naiveRmsNorm(x, w, T, H, eps), 1e-6, 'rms');
  const residual = backend.upload(hostF32('r', [T, H], r));
  const out = backend.addRmsNorm(backend.upload(hostF32('x', [T, H], x)), residual, wt, eps);
  const sum = x.map((v, i) => v + r[i]!);
  assert.deepEqual(data(residual), sum);
  assertClose(data(out), naiveRmsNorm(sum, w, T, H, eps), 1e-6, 'addRms');
});

test('siluMul, embedding and gatherLogitRows match naive versions', () => {
  const [T, I] = [3, 10];
  const g = randomArray(T * 2 * I, 7, -4, 4);
  backend.beginStep(batchOf([{ ids: [0], start: 0, pages: [0] }], 4));
  const expected: number[] = [];
  for (let t = 0; t < T; t++) {
    for (let i = 0; i < I; i++) {
      const gate = g[t * 2 * I + i]!;
      expected.push((gate / (1 + Math.exp(-gate))) * g[t * 2 * I + I + i]!);
    }
  }
  assertClose(data(backend.siluMul(backend.upload(hostF32('g', [T, 2 * I], g)))), expected, 1e-6, 'silu');

  const table = randomArray(11 * 6, 8);
  const ids = [3, 0, 10, 3];
  const step = backend.beginStep(batchOf([{ ids, start: 0, pages: [0] }], 4, [2, 0]));
  const emb = backend.embedding(backend.upload(hostF32('e', [11, 6], table)), step);
  assert.deepEqual(data(emb), Float32Array.from(ids.flatMap((id) => [...table.subarray(id * 6, id * 6 + 6)])));
  const rows = backend.gatherLogitRows(emb, step);
  assert.deepEqual(rows.shape, [2, 6]);
  assert.deepEqual(data(rows), Float32Array.from([...table.subarray(60, 66), ...table.subarray(18, 24)]));
  const bad = backend.beginStep(batchOf([{ ids: [11], start: 0, pages: [0] }], 4));
  assert.throws(() => backend.embedding(backend.upload(hostF32('e', [11, 6], table)), bad), /token id 11/);
});

test('qkNormRope: per-head RMSNorm of q and k, then HF rotate_half at each token position; v untouched', () => {
  const [H, KVH, D, eps] = [4, 2, 8, 1e-6];
  const width = (H + 2 * KVH) * D;
  const positions = [0, 5, 17];
  const qkv = randomArray(positions.length * width, 9);
  const qNorm = randomArray(D, 10, 0.5, 1.5);
  const kNorm = randomArray(D, 11, 0.5, 1.5);
  const invFreq = randomArray(D / 2, 12, 0.01, 1);
  for (const withNorm of [true, false]) {
    const step = backend.beginStep(batchOf([{ ids: [0, 0, 0], start: 0, pages: [0] }], 32));
    step.batch.positions.set(positions);
    const t = backend.upload(hostF32('qkv', [positions.length, width], qkv));
    backend.qkNormRope(t, withNorm ? backend.upload(hostF32('qn', [D], qNorm)) : null,
      withNorm ? backend.upload(hostF32('kn', [D], kNorm)) : null, eps, H, KVH, { headDim: D, invFreq }, step);
    const expected = Float32Array.from(qkv);
    positions.forEach((pos, r) => {
      for (let h = 0; h < H + KVH; h++) {
        const off = r * width + h * D;
        let head = qkv.slice(off, off + D);
        if (withNorm) head = Float32Array.from(naiveRmsNorm(head, h < H ? qNorm : kNorm, 1, D, eps));
        expected.set(rotateHalf(head, pos, invFreq), off);
      }
    });
    assertClose(data(t), expected, 1e-6, `withNorm=${withNorm}`);
  }
});

test('the wasm heap grows, reuses a released top allocation, and refuses more than 4 GiB with a message naming the way out', () => {
  const heap = new WasmHeap();
  const first = heap.alloc(1000);
  const second = heap.alloc(300_000);
  assert.equal(second.offset * 4, first.offset * 4 + 4032);
  second.data.fill(1.5);
  assert.equal(second.data[299_999], 1.5);
  heap.release(second);
  assert.equal(heap.alloc(10).offset, second.offset);
  assert.throws(() => heap.alloc(2 ** 30), /exceed the 4 GiB .* 'js' matmul kernel/);
});

test('memory reports the KV budget; a cache over budget is refused', () => {
  const b = new CpuBackend({ kvCacheBytes: 4096, numThreads: 1 });
  b.upload(hostF32('w', [4, 4], randomArray(16, 13)));
  assert.equal(b.memory().weightBytes, 64);
  assert.equal(b.memory().availableKvBytes, 4096);
  b.allocateKvCache({ numBlocks: 2, blockSize: 4, numLayers: 2, numKvHeads: 2, headDim: 8 });
  assert.equal(b.memory().availableKvBytes, 4096 - 2 * 2 * 2 * 4 * 2 * 8 * 4);
  assert.throws(() => b.allocateKvCache({ numBlocks: 5, blockSize: 4, numLayers: 2, numKvHeads: 2, headDim: 8 }), /budget/);
  b.dispose();
  const wasmBackend = new CpuBackend({ kvCacheBytes: 2 ** 40, numThreads: 1, kernel: 'wasm' });
  const available = wasmBackend.memory().availableKvBytes;
  assert.ok(available < 2 ** 32 && available > 2 ** 31, `wasm KV space ${available} is capped by the 4 GiB heap`);
  wasmBackend.dispose();
});
