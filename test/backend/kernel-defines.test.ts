// The constants a kernel shares with TypeScript reach its build as #defines of
// the TypeScript values, and no kernel file defines them itself.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expandSource, kernelFiles, kernelSource, loadCubin } from '../../src/backend/cuda/compile.js';
import { DECODE_CHUNK_ROUND, FOLD_BATCH, MAX_CLUSTER, SHORT_ROW_KV } from '../../src/backend/cuda/decode-splits.js';
import { CHAIN_STAGES, CHAIN_WHOLE_MAX_SPLIT } from '../../src/backend/cuda/gemm-chain.js';
import { GEMM_ROWS_CHUNK_K, GEMM_ROWS_SPLIT_WARPS } from '../../src/backend/cuda/gemm-rows.js';
import { GGUF_DEQUANT_WARPS, GGUF_GEMV_ROWS, GGUF_GEMV_WARPS } from '../../src/backend/cuda/gguf-layout.js';
import {
  CONV_MAX_TAPS, DECODE_WARPS, DELTANET_CHUNK_THREADS, deltanetChunkedSharedBytes,
  KERNEL_DEFINES, moduleDefines, NORM_VEC,
  PEER_AR_DATA_OFFSET, PEER_AR_EPOCH_OFFSET, PEER_AR_MAX_RANKS, ROPE_WARPS, SAMPLE_THREADS,
} from '../../src/backend/cuda/kernel-defines.js';
import { FP8_BLOCK } from '../../src/backend/fp8-linear.js';
import { MOE_COMBINE_BATCH, MOE_COMBINE_THREADS, MOE_FP8_SPLIT_WARPS, MOE_GROUP_THREADS, MOE_ROUTE_PER_LANE, MOE_ROUTE_WARPS,
  MOE_WGMMA_STAGES } from '../../src/backend/cuda/moe-plan.js';
import { META_BLOCK_TABLE_STRIDE, PREFILL_TILE_ROWS } from '../../src/backend/cuda/step-meta.js';

/** The build lists as the kernels receive them, written out here by hand: a change to one is a change to the PTX. */
const PREFILL_BUILD_LIST = 'X(, 64, 64, 2, 1, false, 3) X(_h1, 128, 32, 2, 1, false, 3) X(, 128, 32, 2, 2, true, 2) ' +
  'X(_h4, 128, 32, 2, 4, true, 1) X(, 256, 16, 2, 1, false, 1)';

/** The sources NVRTC would be handed, captured by a compiler that compiles nothing. */
function compiledSources(files: string[]): Map<string, string> {
  const dir = mkdtempSync(join(tmpdir(), 'quire-defines-'));
  const saved = process.env.QUIRE_KERNEL_DEFINES;
  delete process.env.QUIRE_KERNEL_DEFINES;
  const sources = new Map<string, string>();
  try {
    for (const f of files) {
      loadCubin(f, 90, { version: 'test', compile: (src) => { sources.set(f, src); return new Uint8Array(1); } }, dir);
    }
  } finally {
    if (saved !== undefined) process.env.QUIRE_KERNEL_DEFINES = saved;
    rmSync(dir, { recursive: true, force: true });
  }
  return sources;
}

test('each kernel build receives the TypeScript values of the constants it shares', () => {
  const expected: [string, string, number | string][] = [
    ['allreduce.cu', 'PEER_AR_MAX_RANKS', PEER_AR_MAX_RANKS],
    ['allreduce.cu', 'PEER_AR_EPOCH_OFFSET', PEER_AR_EPOCH_OFFSET],
    ['allreduce.cu', 'PEER_AR_DATA_OFFSET', PEER_AR_DATA_OFFSET],
    ['attention_decode.cu', 'DECODE_WARPS', DECODE_WARPS],
    ['attention_decode.cu', 'DECODE_CHUNK_ROUND', DECODE_CHUNK_ROUND],
    ['attention_decode.cu', 'DECODE_SHORT_ROW_KV', SHORT_ROW_KV],
    ['attention_decode.cu', 'DECODE_MAX_CLUSTER', MAX_CLUSTER],
    ['attention_decode.cu', 'DECODE_FOLD_BATCH', FOLD_BATCH],
    ['attention_prefill.cu', 'PREFILL_TILE_ROWS', PREFILL_TILE_ROWS],
    ['attention_prefill.cu', 'PREFILL_BUILDS(X)', PREFILL_BUILD_LIST],
    ['deltanet.cu', 'CONV_MAX_TAPS', CONV_MAX_TAPS],
    ['deltanet_chunked.cu', 'DELTANET_CHUNK_THREADS', DELTANET_CHUNK_THREADS],
    ['deltanet_chunked.cu', 'DELTANET_CHUNKS(X, s, T, DK, ss, ST)', 'X(s, T, DK, ss, ST, 32) X(s, T, DK, ss, ST, 64)'],
    // the chunked rule's shared bytes by key dim and chunk: 4 x ((2 Dk + 2 C) (C + 4) + 36 (Dk + C) + 3 C)
    ['deltanet_chunked.cu', 'DELTANET_CHUNKED_BYTES(dk, c)', '((dk) == 32 && (c) == 32 ? 28032 : (dk) == 32 && '
      + '(c) == 64 ? 66816 : (dk) == 64 && (c) == 32 ? 41856 : (dk) == 64 && (c) == 64 ? 88832 : (dk) == 128 && '
      + '(c) == 32 ? 69504 : (dk) == 128 && (c) == 64 ? 132864 : -1)'],
    // the tensor-core build's: 4 x (2 C (C + 4) + 36 (Dk + C) + 41 C + C (Dk + 8) + 32 (max(Dk, C) + 8))
    ['deltanet_chunked.cu', 'DELTANET_CHUNKED_MMA_BYTES(dk, c)', '((dk) == 32 && (c) == 32 ? 33920 : (dk) == 32 && '
      + '(c) == 64 ? 78592 : (dk) == 64 && (c) == 32 ? 46720 : (dk) == 64 && (c) == 64 ? 91392 : (dk) == 128 && '
      + '(c) == 32 ? 72320 : (dk) == 128 && (c) == 64 ? 125184 : -1)'],
    ['deltanet.cu', 'DELTANET_KEY_DIMS(X, s, T)', 'X(s, T, 32) X(s, T, 64) X(s, T, 128)'],
    ['deltanet_chunked.cu', 'DELTANET_KEY_DIMS(X, s, T)', 'X(s, T, 32) X(s, T, 64) X(s, T, 128)'],
    ['gemm_chain.cu', 'CHAIN_STAGES', CHAIN_STAGES],
    ['gemm_chain.cu', 'CHAIN_WHOLE_MAX_SPLIT', CHAIN_WHOLE_MAX_SPLIT],
    ['gemm_chain.cu', 'FP8_BLOCK', FP8_BLOCK],
    ['gemm_rows.cu', 'CHUNK_K', GEMM_ROWS_CHUNK_K],
    ['gemm_rows.cu', 'GEMM_ROWS_SPLIT_WARPS', GEMM_ROWS_SPLIT_WARPS],
    ['gemm_rows.cu', 'GEMM_ROWS_SPLIT_BUILDS(X)', 'X(1, 1, 4) X(1, 2, 4) X(1, 4, 2)'],
    ['gemm_rows.cu', 'GEMM_ROWS_TILED_BUILDS(X)', 'X(2, 2, 2, 2, 3, false) X(1, 4, 4, 4, 3, true)'],
    ['gguf.cu', 'GGUF_GEMV_WARPS', GGUF_GEMV_WARPS],
    ['gguf.cu', 'GGUF_GEMV_ROWS', GGUF_GEMV_ROWS],
    ['gguf.cu', 'GGUF_DEQUANT_WARPS', GGUF_DEQUANT_WARPS],
    ['gguf.cu', 'GGUF_GEMV_TOKENS(X, fmt, F)', 'X(fmt, F, 1) X(fmt, F, 2) X(fmt, F, 4) X(fmt, F, 8)'],
    ['gguf.cu', 'GGUF_UNIT_Q8_0', 32],
    ['gguf.cu', 'GGUF_UNIT_Q4_0', 32],
    ['gguf.cu', 'GGUF_UNIT_Q4_K', 64],
    ['gguf.cu', 'GGUF_UNIT_Q5_K', 64],
    ['gguf.cu', 'GGUF_UNIT_Q6_K', 128],
    ['moe.cu', 'CHUNK_K', GEMM_ROWS_CHUNK_K],
    ['moe.cu', 'GEMM_ROWS_SPLIT_WARPS', GEMM_ROWS_SPLIT_WARPS],
    ['moe.cu', 'MOE_ROUTE_WARPS', MOE_ROUTE_WARPS],
    ['moe.cu', 'MOE_ROUTE_PER_LANE', MOE_ROUTE_PER_LANE],
    ['moe.cu', 'MOE_GROUP_THREADS', MOE_GROUP_THREADS],
    ['moe.cu', 'MOE_COMBINE_THREADS', MOE_COMBINE_THREADS],
    ['moe.cu', 'MOE_COMBINE_BATCH', MOE_COMBINE_BATCH],
    ['moe.cu', 'MOE_GATE_UP_SPLIT_BUILDS(X)', 'X(2, 1, 4) X(2, 2, 2) X(2, 4, 2)'],
    ['moe.cu', 'MOE_DOWN_SPLIT_BUILDS(X)', 'X(1, 1, 4) X(1, 2, 4) X(1, 4, 2)'],
    ['moe.cu', 'MOE_TILED_BUILDS(X)', 'X(2, 2, 2, 2, 3, false) X(1, 4, 4, 4, 3, true)'],
    ['moe.cu', 'NORM_VEC', NORM_VEC],  // norm.cuh's register rows (moe_combine_add_rms_norm)
    ['moe.cu', 'FP8_BLOCK', FP8_BLOCK],  // the _fp8 builds' scale blocks
    ['moe.cu', 'MOE_FP8_SPLIT_WARPS', MOE_FP8_SPLIT_WARPS],
    ['moe_wgmma.cu', 'MOE_WGMMA_STAGES', MOE_WGMMA_STAGES],
    ['norm.cu', 'NORM_VEC', NORM_VEC],
    ['quant_fp8.cu', 'FP8_BLOCK', FP8_BLOCK],
    ['rope.cu', 'ROPE_WARPS', ROPE_WARPS],
    ['sample.cu', 'SAMPLE_THREADS', SAMPLE_THREADS],
  ];
  const sources = compiledSources(kernelFiles());
  for (const [file, name, value] of expected) {
    const src = sources.get(file)!;
    assert.ok(src.startsWith(moduleDefines(file)), `${file} opens with its defines`);
    assert.ok(src.split('\n').includes(`#define ${name} ${value}`), `${file} gets ${name} ${value}`);
  }
  for (const [file, src] of sources) {
    assert.match(src, new RegExp(`^#define META_BLOCK_TABLE_STRIDE ${META_BLOCK_TABLE_STRIDE}$`, 'm'), file);
  }
  // every entry of the map is in the list above, so none is passed untested
  const named = Object.entries(KERNEL_DEFINES).flatMap(([f, d]) => Object.keys(d).map((n) => `${f} ${n}`)).sort();
  assert.deepEqual(named, expected.map(([f, n]) => `${f} ${n}`).sort());
});

test('a shared constant is used by its kernel and defined by no kernel file', () => {
  const common = ['META_NUM_TOKENS', 'META_NUM_SEQS', 'META_BLOCK_TABLE_STRIDE'];
  for (const f of kernelFiles()) {
    const text = expandSource(f);
    for (const name of [...common, ...Object.keys(KERNEL_DEFINES[f] ?? {}).map((n) => n.replace(/\(.*/, ''))]) {
      assert.doesNotMatch(text, new RegExp(`#\\s*(define|ifndef|undef)\\s+${name}\\b`), `${f} defines ${name}`);
    }
    for (const name of Object.keys(KERNEL_DEFINES[f] ?? {}).map((n) => n.replace(/\(.*/, ''))) {
      assert.match(text.replace(/\/\/.*$/gm, ''), new RegExp(`\\b${name}\\b`), `${f} uses ${name}`);
    }
  }
  assert.equal(kernelSource('norm.cu', {}), moduleDefines('norm.cu') + expandSource('norm.cu'));
});

test('the chunked DeltaNet rule\'s shared bytes: three blocks a SM of the chunks-of-32 builds at Dk 128', () => {
  // 228 KB a SM, 1 KB of it reserved a block (the tensor-core build's launch bounds ask for three, the plain
  // build's with DELTANET_CHUNKED32_MIN_BLOCKS=3)
  for (const mma of [false, true]) assert.ok(3 * (deltanetChunkedSharedBytes(128, 32, mma) + 1024) <= 228 * 1024);
  // the tensor-core build in chunks of 64 still fits a block (227 KB at most)
  assert.ok(deltanetChunkedSharedBytes(128, 64, true) <= 227 * 1024);
});
