// cuBLASLt's algorithms sum each output over K in one chain from SINGLE_CHAIN_MIN_TOKENS rows (no split-K,
// QUIRE_CUBLAS_SINGLE_CHAIN_FROM): what makes those bits the same on every Hopper part and equal to the chain kernels'
// (gemm-chain*.test.ts compare them at 256 rows). Fewer rows keep the heuristic's choice. Prints, for the record,
// which of these shapes the heuristic would split without the preference. A tuned Gemm (gemm-tune.ts: the fastest
// single-chain candidate of the first's bits) gives the untuned one's bits, and its tuner never takes a faster launch
// of other bits (session 46: not every single-chain candidate sums in the same order).

import { after, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { Device } from '../../src/backend/cuda/device.js';
import { Gemm, SINGLE_CHAIN_MIN_TOKENS } from '../../src/backend/cuda/ffi/cublaslt.js';
import { EventGemmTuner } from '../../src/backend/cuda/gemm-tune.js';
import { f32ToBf16 } from '../../src/loader/dtype.js';
import { noCuda, randomBf16 } from './cuda-helpers.js';

// (N, K): qwen3-0.6b's qkv, o, gate_up, down, lm_head; qwen3-8b's qkv, o, gate_up, down; the demo model's
const SHAPES = [[4096, 1024], [1024, 2048], [6144, 1024], [1024, 3072], [151936, 1024], [6144, 4096], [4096, 4096],
  [24576, 4096], [4096, 12288], [512, 256], [256, 256], [1536, 256], [256, 768]] as const;
const TOKENS = [9, 16, 64, 256, 2048, 16384];

describe('cuBLASLt without split-K', { skip: noCuda }, () => {
  const device = noCuda ? null : new Device(0);
  const bytes = 32 << 20;
  const ws = device ? device.alloc(bytes) : 0n;
  after(() => {
    if (device) {
      device.free(ws);
      device.dispose();
    }
  });

  test(`every bf16 plan of ${SINGLE_CHAIN_MIN_TOKENS} rows and more sums K in one chain; fewer keep the heuristic's`, (t) => {
    const pinned = new Gemm(ws, bytes);
    const free = new Gemm(ws, bytes, 'block', Infinity);
    const split: string[] = [];
    try {
      for (const [N, K] of SHAPES) {
        for (const T of TOKENS) {
          const s = free.splitOf(T, N, K);
          assert.deepEqual(pinned.splitOf(T, N, K), T >= SINGLE_CHAIN_MIN_TOKENS ? { splitK: 1, reductionScheme: 0 } : s,
            `T ${T} N ${N} K ${K}`);
          if (s.splitK !== 1) split.push(`T ${T} N ${N} K ${K}: split ${s.splitK} (scheme ${s.reductionScheme})`);
        }
      }
    } finally {
      pinned.dispose();
      free.dispose();
    }
    t.diagnostic(`${device!.name}: the heuristic alone would split ${split.length} of ${SHAPES.length * TOKENS.length}` +
      (split.length ? `: ${split.join('; ')}` : ''));
  });

  const read = (p: bigint, n: number): Uint16Array => {
    const dev = device!;
    const host = dev.hostAlloc(n * 2);
    try {
      dev.copyToHostAsync(host, p, n * 2);
      dev.synchronize();
      return new Uint16Array(host.view.slice(0, n * 2));
    } finally {
      dev.hostFree(host);
    }
  };

  test('a tuned Gemm gives the untuned one\'s bits from SINGLE_CHAIN_MIN_TOKENS rows; fewer rows, and counts off '
    + 'the graphs\' buckets, are not tuned', (t) => {
    const dev = device!;
    // qwen3.5-27b's down (the heuristic's first pick 4.6x its fastest at 128 rows, session 46), qwen3-8b's down
    // and gate_up, qwen3-0.6b's o
    const shapes = [[5120, 17408], [4096, 12288], [24576, 4096], [1024, 2048]] as const;
    const Ts = [128, 160, 256];
    const tuner = new EventGemmTuner(dev, 256);
    const [plain, tuned] = [new Gemm(ws, bytes), new Gemm(ws, bytes, 'block', SINGLE_CHAIN_MIN_TOKENS, tuner)];
    const other: string[] = [];
    try {
      for (const [N, K] of shapes) {
        const Tmax = Math.max(...Ts);
        const [w, x, y] = [dev.alloc(N * K * 2), dev.alloc(Tmax * K * 2), dev.alloc(Tmax * N * 2)];
        try {
          dev.upload(w, f32ToBf16(randomBf16(N * K, 1, -0.05, 0.05)));
          dev.upload(x, f32ToBf16(randomBf16(Tmax * K, 2)));
          for (const T of Ts) {
            plain.run(x, w, y, T, N, K, dev.stream);
            const expected = read(y, T * N);
            const before = tuner.numTuned;
            dev.fillBytesAsync(y, 0, T * N * 2);
            tuned.run(x, w, y, T, N, K, dev.stream);
            // one candidate leaves nothing to time (27b's down at 160 rows on an H200, session 47)
            const numCandidates = plain.candidates(T, N, K, true, 8).length;
            assert.equal(tuner.numTuned, before + (numCandidates >= 2 ? 1 : 0),
              `T ${T} N ${N} K ${K}: tuned once where ${numCandidates} candidates`);
            if (numCandidates >= 2) assert.ok(tuner.numEligible.at(-1)! >= 1);
            if (T === 128 && N === 5120) assert.equal(tuner.numTuned, before + 1, 'the motivating shape is tuned');
            assert.deepEqual(read(y, T * N), expected, `T ${T} N ${N} K ${K}: tuned`);
            // for the record: which single-chain candidates sum in another order
            for (const [i, c] of plain.candidates(T, N, K, true, 8).entries()) {
              plain.runAlgo(c.algo, x, w, y, T, N, K, dev.stream);
              const got = read(y, T * N);
              if (got.some((v, j) => v !== expected[j])) other.push(`${T}x${N}x${K} candidate ${i}`);
            }
          }
          const before = tuner.numTuned;
          tuned.run(x, w, y, 64, N, K, dev.stream);
          assert.equal(tuner.numTuned, before, 'fewer rows than SINGLE_CHAIN_MIN_TOKENS keep the heuristic\'s pick');
          tuned.run(x, w, y, 130, N, K, dev.stream);
          assert.equal(tuner.numTuned, before, 'a count off the graphs\' buckets (130) keeps the heuristic\'s pick');
        } finally {
          dev.synchronize();
          for (const p of [w, x, y]) dev.free(p);
        }
      }
    } finally {
      plain.dispose();
      tuned.dispose();
      tuner.dispose();
    }
    t.diagnostic(`${dev.name}: eligible candidates per tuned shape ${tuner.numEligible.join(' ')}; single-chain ` +
      `candidates of other bits: ${other.join(', ') || 'none'}`);
  });

  test('the tuner times only launches of the first\'s bits: a faster one writing other bits is not taken', () => {
    const dev = device!;
    const tuner = new EventGemmTuner(dev, 256);
    const n = 1 << 20;
    const y = dev.alloc(n);
    try {
      // launch 0 and 2 write the same bytes (2 writes them 8 times over, so it is slower); launch 1 is one memset of
      // other bytes, the fastest
      const launches = [() => dev.fillBytesAsync(y, 7, n), () => dev.fillBytesAsync(y, 9, n),
        () => { for (let i = 0; i < 8; i++) dev.fillBytesAsync(y, 7, n); }];
      assert.equal(tuner.fastest(launches, { ptr: y, bytes: n }), 0);
      assert.deepEqual(tuner.numEligible, [2]);
    } finally {
      dev.synchronize();
      dev.free(y);
      tuner.dispose();
    }
  });
});
