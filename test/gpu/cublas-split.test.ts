// cuBLASLt's algorithms sum each output over K in one chain from SINGLE_CHAIN_MIN_TOKENS rows (no split-K,
// QUIRE_CUBLAS_SINGLE_CHAIN_FROM): what makes those bits the same on every Hopper part and equal to the chain kernels'
// (gemm-chain*.test.ts compare them at 256 rows). Fewer rows keep the heuristic's choice. Prints, for the record,
// which of these shapes the heuristic would split without the preference.

import { after, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { Device } from '../../src/backend/cuda/device.js';
import { Gemm, SINGLE_CHAIN_MIN_TOKENS } from '../../src/backend/cuda/ffi/cublaslt.js';
import { noCuda } from './cuda-helpers.js';

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
});
