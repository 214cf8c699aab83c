// Launch plans for kernels/moe.cu (Backend.moeExperts on the device). Every grid and buffer here is a function of
// T, E, topK, H and I, never of the routing: a decode step's graph replays them whatever its tokens choose. The
// GEMMs are gemm_rows' variants (gemm-rows.ts) on each expert's rows: what a sum adds, and in what order, follows K
// alone (sliceChunks), so the variant and tile picked here never change a bit. Block-FP8 experts run the same
// variants' _fp8 builds (moe.cu), their k cut by fp8SliceChunks.

import { FP8_BLOCK } from '../fp8-linear.js';
import { readKnob } from '../../knobs/knobs.js';
import { blockTile, defaultVariant, GEMM_ROWS_CHUNK_K, GEMM_ROWS_SPLIT_WARPS, GEMM_ROWS_VARIANTS, type GemmRowsVariant,
  numSlices, sliceChunks } from './gemm-rows.js';

/** Rows (tokens) of moe_route a block: a warp a row. */
export const MOE_ROUTE_WARPS = 4;
/** Experts a lane of moe_route keeps in registers: E up to 32 times this. */
export const MOE_ROUTE_PER_LANE = 16;
export const MOE_MAX_EXPERTS = 32 * MOE_ROUTE_PER_LANE;
/** moe_route writes a row's k choices from lanes 0..k-1. */
export const MOE_MAX_TOP_K = 32;
/** moe_group's one block. */
export const MOE_GROUP_THREADS = 1024;
/** moe_combine's threads a block, 8 columns each. */
export const MOE_COMBINE_THREADS = 128;
/**
 * A row's k choices the combine reads at once (kernels/moe.cu CombineRow; QUIRE_MOE_COMBINE_BATCH): their positions
 * and weights, then their rows, then the sums in order. 1, the default, reads one choice at a time (two memory
 * latencies each, in turn); 8 measured no faster on qwen3-30b-a3b (H200, session 38). The same sums in the same order
 * at any value: no bit changes.
 */
export const MOE_COMBINE_BATCH = readKnob('QUIRE_MOE_COMBINE_BATCH');
/**
 * Most rows moe_router_fused takes (router GEMM, route and group in one launch) where a plan is asked without the
 * engine's QUIRE_MOE_FUSED_ROUTER_MAX_ROWS (tests): its last block routes and groups every row alone. The engine's
 * default is 0, never: on an H200 (session 28, docs/perf-log.md) Qwen3-30B-A3B decoded 284 tok/s with it at batch 1
 * and 302 without, 2,696 and 2,919 at batch 64: its 8 blocks read the router weight slower than cuBLASLt's.
 */
export const MOE_FUSED_ROUTER_MAX_ROWS = 64;

/**
 * Most warps of an _fp8 split block (their launch bounds), and so most slices of an FP8 GEMM's k: at bf16's 16 a
 * thread gets 128 registers, which its scales overflow (the m2 n4 build spilled 600 bytes), at 8 it may take 255.
 */
export const MOE_FP8_SPLIT_WARPS = 8;
/** Fewest 128-k scale groups of an FP8 slice: 256 bytes of a row, 4 chunks that a warp loads at once. */
const MIN_FP8_SLICE_GROUPS = 2;
/** k of an FP8 chunk: 64 e4m3, the 64 bytes of a row a bf16 chunk's 32 k take (gemm_rows.cuh). */
export const FP8_CHUNK_K = 2 * GEMM_ROWS_CHUNK_K;

/**
 * Chunks (of 64 e4m3 k) a slice of an FP8 GEMM's k takes: whole 128-k groups, a function of K only (the contract);
 * at most MOE_FP8_SPLIT_WARPS slices.
 */
export function fp8SliceChunks(K: number): number {
  if (K % FP8_BLOCK !== 0) throw new Error(`moe: FP8 K ${K} is not a multiple of ${FP8_BLOCK}`);
  return 2 * Math.max(MIN_FP8_SLICE_GROUPS, Math.ceil(K / FP8_BLOCK / MOE_FP8_SPLIT_WARPS));
}

export function fp8NumSlices(K: number): number {
  return Math.ceil(K / FP8_CHUNK_K / fp8SliceChunks(K));
}

/** Stages of k (64 each, 32 KB of shared memory) moe_wgmma.cu keeps in flight. */
export const MOE_WGMMA_STAGES = 3;
/** moe_wgmma.cu's block: 128 tokens by 128 weight rows (gate_up: 64 outputs' gate and up rows), two warpgroups. */
const WGMMA_TOKENS = 128;
const WGMMA_WEIGHT_ROWS = 128;
/** A stage: 64 k (128 bytes) of every token and weight row; plus 1 KB to align the tiles for the 128-byte swizzle. */
const WGMMA_SHARED_BYTES = MOE_WGMMA_STAGES * (WGMMA_TOKENS + WGMMA_WEIGHT_ROWS) * 128 + 1024;

/** gate_up's split builds: gemm_rows' split variants with two m tiles (gate, up) a warp, fewer chunks in flight. */
const GATE_UP_SPLIT_PREFETCH: Readonly<Record<number, number>> = { 1: 4, 2: 2, 4: 2 };

/** The X-macro lists moe.cu instantiates (kernel-defines.ts): X(MT, NT, PF) splits, X(WM, WN, MT, NT, STAGES, SMEM_SUM) tiles. */
export function moeBuildLists(): { gateUpSplit: string; downSplit: string; tiled: string } {
  const splits = GEMM_ROWS_VARIANTS.filter((v) => v.kind === 'split');
  return {
    gateUpSplit: splits.map((v) => `X(2, ${v.nt}, ${GATE_UP_SPLIT_PREFETCH[v.nt]!})`).join(' '),
    downSplit: splits.map((v) => `X(1, ${v.nt}, ${v.prefetch})`).join(' '),
    tiled: GEMM_ROWS_VARIANTS.filter((v) => v.kind === 'tiled')
      .map((v) => `X(${v.wm}, ${v.warps / v.wm}, ${v.mt}, ${v.nt}, ${v.stages}, ${v.smemSum})`).join(' '),
  };
}

export interface MoeGemmLaunch {
  /** The kernel's file: moe.cu, or moe_wgmma.cu (Hopper). */
  file: 'moe.cu' | 'moe_wgmma.cu';
  /** moe.cu's kernel: a bf16 build, or an _fp8 one (block-FP8 experts, their inputs quantized per 128 columns). */
  kernel: string;
  /** Tokens of a block's tile (BN): its tile list's (expertTileList), grid[1] entries long. */
  tokens: number;
  grid: [number, number, number];
  block: number;
  sharedBytes: number;
  sliceChunks: number;
  /** The gemm_rows variant of a moe.cu build; none for moe_wgmma.cu's. */
  variant?: GemmRowsVariant;
}

export interface MoePlan {
  gateUp: MoeGemmLaunch;
  down: MoeGemmLaunch;
  /** moe_router_fused's launch for T rows on a router [E, H], or null (T over MOE_FUSED_ROUTER_MAX_ROWS: the GEMM path). */
  router: { grid: [number, number, number]; block: number; sharedBytes: number; sliceChunks: number } | null;
}

/**
 * Token tiles of BN over all experts, for any routing of T rows to k experts each: an expert takes at most T rows
 * (a row picks an expert once), and the P = T k pairs fill at most ceil(P / BN) tiles plus one part-filled tile for
 * each of the at most min(E, P) experts chosen.
 */
export function maxExpertTiles(T: number, E: number, topK: number, BN: number): number {
  const P = T * topK;
  const experts = Math.min(E, P);
  return Math.min(Math.ceil(P / BN) + experts, experts * Math.ceil(T / BN));
}

/**
 * The tile list moe_group writes for a grouped GEMM of token tiles of BN (moe.cu TileList), as int32 quadruples: entry
 * y is (expert, its first grouped position, its count, the tile's first token of the expert's), experts in order, an
 * expert's tiles in order, then (-1, 0, 0, 0) to `entries` (the GEMM's grid y). Block y of the GEMM runs entry y.
 */
export function expertTileList(counts: readonly number[], BN: number, entries: number): Int32Array {
  const out = new Int32Array(4 * entries);
  let y = 0;
  let first = 0;
  counts.forEach((count, e) => {
    for (let tok0 = 0; tok0 < count; tok0 += BN, y++) {
      if (y >= entries) throw new Error(`expertTileList: more than ${entries} tiles of ${BN}`);
      out.set([e, first, count, tok0], 4 * y);
    }
    first += count;
  });
  for (; y < entries; y++) out.set([-1, 0, 0, 0], 4 * y);
  return out;
}

/**
 * The tile lists a plan's GEMMs read, gate_up's then down's where its tiles differ (one list serves both where they
 * match): moe_group's and moe_router_fused's (tilesA, bnA, entriesA, tilesB, bnB, entriesB), bnB 0 for none.
 */
export function tileLists(plan: MoePlan): { tokens: number; entries: number }[] {
  const { gateUp, down } = plan;
  const a = { tokens: gateUp.tokens, entries: gateUp.grid[1] };
  return down.tokens === gateUp.tokens ? [a] : [a, { tokens: down.tokens, entries: down.grid[1] }];
}

/** moe_group's shared memory for E experts: its cursors, then each list's first tile of every expert and the total. */
export function moeGroupSharedBytes(E: number): number {
  return 4 * (3 * E + 2);
}

/** Rows an expert gets on average (at most T): what picks the variant, as T does for gemm_rows. */
export function rowsPerExpert(T: number, E: number, topK: number): number {
  return Math.min(T, Math.ceil((T * topK) / E));
}

/** moe_wgmma.cu's launch: a block per 128 tokens of an expert by 128 weight rows (gate_up: 64 outputs). */
function planWgmma(gateUp: boolean, T: number, numLocal: number, topK: number, N: number): MoeGemmLaunch {
  const outputs = gateUp ? WGMMA_WEIGHT_ROWS / 2 : WGMMA_WEIGHT_ROWS;
  return { file: 'moe_wgmma.cu', kernel: `moe_${gateUp ? 'gate_up' : 'down'}_wgmma`, tokens: WGMMA_TOKENS,
    grid: [Math.ceil(N / outputs), maxExpertTiles(T, numLocal, topK, WGMMA_TOKENS), 1], block: 256,
    sharedBytes: WGMMA_SHARED_BYTES, sliceChunks: 0 };
}

function planGemm(gateUp: boolean, T: number, numLocal: number, topK: number, N: number, K: number,
  variant: GemmRowsVariant, fp8: boolean): MoeGemmLaunch {
  if (K % 8 !== 0) throw new Error(`moe: K ${K} is not a multiple of 8`);
  const name = `${gateUp ? 'gate_up' : 'down'}${fp8 ? '_fp8' : ''}`;
  const tile = blockTile(variant);
  const y = maxExpertTiles(T, numLocal, topK, tile.tokens);
  const chunks = fp8 ? fp8SliceChunks(K) : sliceChunks(K);
  if (variant.kind === 'split') {
    const mt = gateUp ? 2 : 1;
    const slices = fp8 ? fp8NumSlices(K) : numSlices(K);
    return { file: 'moe.cu', kernel: `moe_${name}_split_m${mt}_n${variant.nt}`, tokens: tile.tokens,
      grid: [Math.ceil(N / 16), y, 1], block: 32 * Math.min(fp8 ? MOE_FP8_SPLIT_WARPS : GEMM_ROWS_SPLIT_WARPS, slices),
      sharedBytes: slices * mt * variant.nt * 4 * 32 * 4, sliceChunks: chunks, variant };
  }
  // gate_up: half of a block's weight rows are gate rows, the other half the same outputs' up rows
  const outputs = gateUp ? tile.rows / 2 : tile.rows;
  const { wm, warps, mt, nt, stages, smemSum } = variant;
  return { file: 'moe.cu', kernel: `moe_${name}_tiled_w${wm}x${warps / wm}_m${mt}_n${nt}`, tokens: tile.tokens,
    grid: [Math.ceil(N / outputs), y, 1],
    block: 32 * warps, sliceChunks: chunks, variant,
    sharedBytes: stages * (tile.rows + tile.tokens) * 128 + (smemSum ? mt * nt * 4 * 32 * warps * 4 : 0) };
}

/**
 * moe_router_fused: gemm_rows' split m1 n1 tiles (16 experts by 8 rows a block, its warps on the slices of H, as
 * planGemmRows plans them), then moe_group's shared memory (moeGroupSharedBytes) after the slices' partials.
 */
function planFusedRouter(T: number, E: number, H: number, numLocal: number): NonNullable<MoePlan['router']> {
  const slices = numSlices(H);
  return { grid: [Math.ceil(E / 16), Math.ceil(T / 8), 1], block: 32 * Math.min(GEMM_ROWS_SPLIT_WARPS, slices),
    sharedBytes: slices * 4 * 32 * 4 + moeGroupSharedBytes(numLocal), sliceChunks: sliceChunks(H) };
}

/**
 * Rows an expert from which bf16 experts take gemm_rows' 64 x 32 tiles (tiled_w2x2_m2_n2) where gemm_rows would take
 * a split build (QUIRE_MOE_TILED_FROM_ROWS; 0: never). One qwen3-30b-a3b layer (bench-moe, H200, session 43): at 8 rows
 * an expert 0.390 ms on split_n1 against 0.347 tiled, at 16 0.474 on split_n2 against 0.338; in the engine W1 +8.7%
 * and decode at 128 / 256 rows +9.5% / +27.5% against 0 (session 44). Under 8 rows (decode batches under 128) the
 * split builds stay: not measured there. Block-FP8 experts have a threshold of their own
 * (QUIRE_MOE_TILED_FROM_ROWS_FP8): their _fp8 tiles were 1.2-1.6x faster than the split builds from 8 rows an expert
 * in bench-moe --fp8 (session 45).
 * Every gemm_rows variant sums alike (sliceChunks): no bit changes.
 */
export const MOE_TILED_FROM_ROWS = readKnob('QUIRE_MOE_TILED_FROM_ROWS');
export const MOE_TILED_FROM_ROWS_FP8 = readKnob('QUIRE_MOE_TILED_FROM_ROWS_FP8');

/** gemm_rows' tiles of 64 weight rows by 32 tokens, 2 x 2 warps (the default for up to 256 rows and 2,048 outputs). */
const TILED_64X32 = GEMM_ROWS_VARIANTS[3]!;

/** gemm_rows' variant for an expert's m rows and N outputs (MOE_TILED_FROM_ROWS[_FP8], else gemm_rows' default). */
export function moeVariant(m: number, N: number, fp8: boolean,
  tiledFromRows = fp8 ? MOE_TILED_FROM_ROWS_FP8 : MOE_TILED_FROM_ROWS): GemmRowsVariant {
  const v = defaultVariant(m, N);
  return tiledFromRows > 0 && m >= tiledFromRows && v.kind === 'split' ? TILED_64X32 : v;
}

/**
 * The two grouped GEMMs of T rows on E experts of width I (hidden H): gemm_rows' variant for an expert's average rows
 * (moeVariant: the split ones under 8, many warps on each weight tile: a decode step reads each routed expert once),
 * unless `variant` names one for both (tests), their _fp8 builds for block-FP8 experts; and the fused router for a
 * decode step's few rows. `numLocal`: the experts this rank holds (expert parallelism: MoeExperts.local), which
 * bound the GEMMs' tiles and moe_group's experts; an expert still gets T k / E rows on average, E the router's.
 * `wgmmaMinRows` (> 0: QUIRE_MOE_WGMMA_MIN_ROWS on an sm_90 device, never batch-invariant): from that many rows an
 * expert, bf16 experts run moe_wgmma.cu's builds (their own bits, not gemm_rows' contract).
 */
export function planMoe(T: number, E: number, topK: number, H: number, I: number,
  variant?: GemmRowsVariant, fusedRouterMaxRows = MOE_FUSED_ROUTER_MAX_ROWS, fp8 = false, numLocal = E,
  wgmmaMinRows = 0): MoePlan {
  const m = rowsPerExpert(T, E, topK);
  const wgmma = wgmmaMinRows > 0 && m >= wgmmaMinRows && !fp8 && variant === undefined;
  const plan = (gateUp: boolean, N: number, K: number, v: GemmRowsVariant) =>
    wgmma ? planWgmma(gateUp, T, numLocal, topK, N) : planGemm(gateUp, T, numLocal, topK, N, K, v, fp8);
  return {
    gateUp: plan(true, I, H, variant ?? moeVariant(m, 2 * I, fp8)),
    down: plan(false, H, I, variant ?? moeVariant(m, H, fp8)),
    router: T <= fusedRouterMaxRows ? planFusedRouter(T, E, H, numLocal) : null,
  };
}
