// Constants a kernel and the TypeScript that plans its launches share: each is
// defined once, on the TypeScript side, and reaches the kernel build as a
// #define before the source (compile.ts kernelSource; part of the cache key).
// A kernel file names these without defining them.

import { FP8_BLOCK } from '../fp8-linear.js';
import { DECODE_CHUNK_ROUND, FOLD_BATCH, MAX_CLUSTER, SHORT_ROW_KV } from './decode-splits.js';
import { CHAIN_STAGES, CHAIN_WHOLE_MAX_SPLIT } from './gemm-chain.js';
import { GGUF_DEQUANT_WARPS, GGUF_DEVICE_FORMATS, GGUF_GEMV_ROWS, GGUF_GEMV_TOKENS, GGUF_GEMV_WARPS } from './gguf-layout.js';
import { GEMM_ROWS_CHUNK_K, GEMM_ROWS_SPLIT_WARPS, gemmRowsBuildLists } from './gemm-rows.js';
import { MOE_COMBINE_BATCH, MOE_COMBINE_THREADS, MOE_FP8_SPLIT_WARPS, MOE_GROUP_THREADS, MOE_ROUTE_PER_LANE, MOE_ROUTE_WARPS,
  MOE_WGMMA_STAGES, moeBuildLists } from './moe-plan.js';
import { META_BLOCK_TABLE_STRIDE, META_NUM_SEQS, META_NUM_TOKENS, PREFILL_TILE_ROWS } from './step-meta.js';

/** Warps of a qk_norm_rope block, a head each (kernels/rope.cu). */
export const ROPE_WARPS = 4;
/** Warps of a decode attention block (kernels/attention_decode.cu). */
export const DECODE_WARPS = 4;
/** 16-byte chunks of a row a norm thread keeps in registers (kernels/norm.cu): rows up to 8 threads NORM_VEC long. */
export const NORM_VEC = 4;
/** Key head dims kernels/deltanet.cu's recurrent kernel is built for (a lane holds Dk / 32 of q and k, and Dk state floats). */
export const DELTANET_KEY_DIMS: readonly number[] = [32, 64, 128];
/** The most causal-conv taps kernels/deltanet.cu keeps in registers; published models have 4. */
export const CONV_MAX_TAPS = 8;
/** Tokens a chunk of the chunked DeltaNet rule may take (kernels/deltanet_chunked.cu builds each), and its threads. */
export const DELTANET_CHUNKS: readonly number[] = [32, 64];
export const DELTANET_CHUNK_THREADS = 256;

/**
 * Bytes of the chunked rule's shared memory for key head dim Dk and chunks of c tokens (deltanet_chunked.cu's
 * ChunkLayout), on CUDA cores or (mma) on tensor cores: two token-by-token matrices, 32 columns of the state and of D
 * (rows 4 floats longer each), the cumulative decays, betas and the state update's weights, and each build's own.
 */
export function deltanetChunkedSharedBytes(Dk: number, c: number, mma = false): number {
  const common = 2 * c * (c + 4) + 36 * (Dk + c) + 3 * c;  // kk, qk; st, d; cl, betas, w
  if (!mma) return 4 * (common + 2 * Dk * (c + 4));  // q and k, f32 transposed
  // the tensor-core build: q and k bf16 (rows of Dk + 8), the state's two bf16 parts or, in their place, the update's
  // B (rows of c + 8); the norms' factors; g_t S^T q_t (rows of 36 floats)
  return 4 * (common + c * (Dk + 8) + 32 * (Math.max(Dk, c) + 8) + 2 * c + 36 * c);
}

/**
 * The one-shot peer all-reduce (kernels/allreduce.cu, peer-allreduce.ts): the most ranks it serves, its fixed grid
 * and block (an element's 16-byte chunk always falls to the same block, whatever the size), and each rank's region:
 * the flags peers raise in it ([block][rank] u32), its own per-block call counters, then two staging buffers from
 * PEER_AR_DATA_OFFSET.
 */
export const PEER_AR_MAX_RANKS = 8;
export const PEER_AR_BLOCKS = 32;
export const PEER_AR_THREADS = 512;
export const PEER_AR_EPOCH_OFFSET = PEER_AR_BLOCKS * PEER_AR_MAX_RANKS * 4;
export const PEER_AR_DATA_OFFSET = 4096;

/** Threads of a sample_tokens block (kernels/sample.cu): one block a row. */
export const SAMPLE_THREADS = 1024;

/**
 * The tensor-core prefill kernel's instantiations (kernels/attention_prefill.cu builds each, for a bf16 and an FP8
 * cache), by head dim and name suffix: keys a K/V tile, tiles in flight, query heads a block, Q in shared memory, and
 * the blocks a SM its launch bounds ask registers for. Tiles are PREFILL_TILE_ROWS rows, a warp per 16 of a head.
 */
export interface PrefillBuild {
  bk: number;
  stages: number;
  hp: number;
  qs: boolean;
  minBlocks: number;
}

export const PREFILL_BUILDS: Readonly<Record<number, Readonly<Record<string, PrefillBuild>>>> = {
  64: { '': { bk: 64, stages: 2, hp: 1, qs: false, minBlocks: 3 } },
  128: {
    _h1: { bk: 32, stages: 2, hp: 1, qs: false, minBlocks: 3 },
    '': { bk: 32, stages: 2, hp: 2, qs: true, minBlocks: 2 },
    _h4: { bk: 32, stages: 2, hp: 4, qs: true, minBlocks: 1 },
  },
  256: { '': { bk: 16, stages: 2, hp: 1, qs: false, minBlocks: 1 } },
};

/** PREFILL_BUILDS as the kernel's X-macro list: X(suffix, D, BK, STAGES, HP, QS, MIN_BLOCKS) each, head dims ascending. */
function prefillBuildList(): string {
  return Object.entries(PREFILL_BUILDS).flatMap(([D, builds]) => Object.entries(builds).map(([suffix, b]) =>
    `X(${suffix}, ${D}, ${b.bk}, ${b.stages}, ${b.hp}, ${b.qs}, ${b.minBlocks})`)).join(' ');
}

/** What every kernel file gets: the step header's word offsets, which common.cuh reads. */
const COMMON: Readonly<Record<string, number>> = { META_NUM_TOKENS, META_NUM_SEQS, META_BLOCK_TABLE_STRIDE };

const deltanetKeyDims = DELTANET_KEY_DIMS.map((dk) => `X(s, T, ${dk})`).join(' ');

/** Each kernel file's #defines beyond COMMON, by the name the kernel uses (a function-like macro with its parameters). */
export const KERNEL_DEFINES: Readonly<Record<string, Readonly<Record<string, number | string>>>> = {
  'allreduce.cu': { PEER_AR_MAX_RANKS, PEER_AR_EPOCH_OFFSET, PEER_AR_DATA_OFFSET },
  'attention_decode.cu': { DECODE_WARPS, DECODE_CHUNK_ROUND, DECODE_SHORT_ROW_KV: SHORT_ROW_KV,
    DECODE_MAX_CLUSTER: MAX_CLUSTER, DECODE_FOLD_BATCH: FOLD_BATCH },
  'attention_prefill.cu': { PREFILL_TILE_ROWS, 'PREFILL_BUILDS(X)': prefillBuildList() },
  'deltanet.cu': { CONV_MAX_TAPS, 'DELTANET_KEY_DIMS(X, s, T)': deltanetKeyDims },
  'deltanet_chunked.cu': { DELTANET_CHUNK_THREADS,
    'DELTANET_CHUNKS(X, s, T, DK, ss, ST)': DELTANET_CHUNKS.map((c) => `X(s, T, DK, ss, ST, ${c})`).join(' '),
    // the bytes the launch gives, which the kernel's layout must match (a static_assert)
    'DELTANET_CHUNKED_BYTES(dk, c)': `(${DELTANET_KEY_DIMS.flatMap((dk) => DELTANET_CHUNKS.map((c) =>
      `(dk) == ${dk} && (c) == ${c} ? ${deltanetChunkedSharedBytes(dk, c)} : `)).join('')}-1)`,
    'DELTANET_CHUNKED_MMA_BYTES(dk, c)': `(${DELTANET_KEY_DIMS.flatMap((dk) => DELTANET_CHUNKS.map((c) =>
      `(dk) == ${dk} && (c) == ${c} ? ${deltanetChunkedSharedBytes(dk, c, true)} : `)).join('')}-1)`,
    'DELTANET_KEY_DIMS(X, s, T)': deltanetKeyDims },
  'gemm_chain.cu': { CHAIN_STAGES, CHAIN_WHOLE_MAX_SPLIT, FP8_BLOCK },
  'gguf.cu': { GGUF_GEMV_WARPS, GGUF_GEMV_ROWS, GGUF_DEQUANT_WARPS, 'GGUF_GEMV_TOKENS(X, fmt, F)': GGUF_GEMV_TOKENS.map((m) => `X(fmt, F, ${m})`).join(' '),
    ...Object.fromEntries(Object.entries(GGUF_DEVICE_FORMATS).map(([type, f]) => [`GGUF_UNIT_${type}`, f.unitElems])) },
  'gemm_rows.cu': { CHUNK_K: GEMM_ROWS_CHUNK_K, GEMM_ROWS_SPLIT_WARPS,
    'GEMM_ROWS_SPLIT_BUILDS(X)': gemmRowsBuildLists().split, 'GEMM_ROWS_TILED_BUILDS(X)': gemmRowsBuildLists().tiled },
  'moe.cu': { CHUNK_K: GEMM_ROWS_CHUNK_K, GEMM_ROWS_SPLIT_WARPS, MOE_ROUTE_WARPS, MOE_ROUTE_PER_LANE, MOE_GROUP_THREADS,
    MOE_COMBINE_THREADS, MOE_COMBINE_BATCH, NORM_VEC, FP8_BLOCK, MOE_FP8_SPLIT_WARPS, 'MOE_GATE_UP_SPLIT_BUILDS(X)': moeBuildLists().gateUpSplit,
    'MOE_DOWN_SPLIT_BUILDS(X)': moeBuildLists().downSplit, 'MOE_TILED_BUILDS(X)': moeBuildLists().tiled },
  'moe_wgmma.cu': { MOE_WGMMA_STAGES },
  'norm.cu': { NORM_VEC },
  'quant_fp8.cu': { FP8_BLOCK },
  'rope.cu': { ROPE_WARPS },
  'sample.cu': { SAMPLE_THREADS },
};

/** The #define lines a kernel file is compiled with (one a line, COMMON first). */
export function moduleDefines(file: string): string {
  return Object.entries({ ...COMMON, ...KERNEL_DEFINES[file] }).map(([name, value]) => `#define ${name} ${value}\n`)
    .join('');
}
