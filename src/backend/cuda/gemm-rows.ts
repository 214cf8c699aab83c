// Launch plans for kernels/gemm_rows.cu, the GEMM of the batch-invariant mode. What an output element sums,
// and in what order, is fixed by K alone (sliceChunks below); the plan only picks the variant, tile and grid for
// T, which never changes a result.

/** k per chunk (the kernel's CHUNK_K: kernel-defines.ts). */
export const GEMM_ROWS_CHUNK_K = 32;
/** Most slices per K: the split variant keeps one partial tile per slice in shared memory. */
const MAX_SLICES = 16;
/** Fewest chunks per slice: 8 chunks of 32 k are 16 loads of 16 bytes per lane in flight. */
const MIN_SLICE_CHUNKS = 8;

/** Chunks (of 32 k) per slice: a function of K only (the batch-invariance contract of gemm_rows.cu). */
export function sliceChunks(K: number): number {
  const chunks = Math.ceil(K / GEMM_ROWS_CHUNK_K);
  return Math.max(MIN_SLICE_CHUNKS, Math.ceil(chunks / MAX_SLICES));
}

export function numSlices(K: number): number {
  return Math.ceil(Math.ceil(K / GEMM_ROWS_CHUNK_K) / sliceChunks(K));
}

export interface GemmRowsVariant {
  kind: 'split' | 'tiled';
  /** m16 tiles of weight rows and n8 tiles of tokens per warp (an instantiation in gemm_rows.cu). */
  mt: number;
  nt: number;
  /** split: most warps sharing a tile's slices; tiled: warps per block, wm along the weight rows. */
  warps: number;
  wm: number;
  /** tiled: stages of two chunks in shared memory (STAGES of the instantiation). */
  stages: number;
  /** tiled: the running slice sum in shared memory (SMEM_SUM), freeing registers for wide warp tiles. */
  smemSum: boolean;
  /** split: chunks a warp loads before their mma are issued (PF of the instantiation). */
  prefetch: number;
}

/** Most warps of a split block (its launch bounds: kernel-defines.ts hands it to gemm_rows.cu). */
export const GEMM_ROWS_SPLIT_WARPS = 16;

const split = (mt: number, nt: number, prefetch: number): GemmRowsVariant =>
  ({ kind: 'split', mt, nt, warps: GEMM_ROWS_SPLIT_WARPS, wm: 1, stages: 0, smemSum: false, prefetch });
const tiled = (wm: number, wn: number, mt: number, nt: number, stages: number, smemSum = false): GemmRowsVariant =>
  ({ kind: 'tiled', mt, nt, warps: wm * wn, wm, stages, smemSum, prefetch: 0 });

/**
 * Every instantiation in gemm_rows.cu, which builds this list (kernel-defines.ts gemmRowsBuildLists: the split
 * variants, then the tiled ones, in this order).
 */
export const GEMM_ROWS_VARIANTS: readonly GemmRowsVariant[] = [split(1, 1, 4), split(1, 2, 4), split(1, 4, 2),
  tiled(2, 2, 2, 2, 3), tiled(1, 4, 4, 4, 3, true)];

/** GEMM_ROWS_VARIANTS as the kernel's X-macro lists: X(MT, NT, PF) a split build, X(WM, WN, MT, NT, STAGES, SMEM_SUM) a tiled one. */
export function gemmRowsBuildLists(): { split: string; tiled: string } {
  const of = (kind: GemmRowsVariant['kind']) => GEMM_ROWS_VARIANTS.filter((v) => v.kind === kind);
  return {
    split: of('split').map((v) => `X(${v.mt}, ${v.nt}, ${v.prefetch})`).join(' '),
    tiled: of('tiled').map((v) => `X(${v.wm}, ${v.warps / v.wm}, ${v.mt}, ${v.nt}, ${v.stages}, ${v.smemSum})`).join(' '),
  };
}

/** Weight rows and tokens of a block's tile. */
export function blockTile(v: GemmRowsVariant): { rows: number; tokens: number } {
  return v.kind === 'split' ? { rows: 16 * v.mt, tokens: 8 * v.nt }
    : { rows: 16 * v.mt * v.wm, tokens: 8 * v.nt * (v.warps / v.wm) };
}

export interface GemmRowsLaunch {
  kernel: string;
  grid: [number, number, number];
  block: number;
  sharedBytes: number;
  sliceChunks: number;
}

/**
 * The fastest variant in the in-graph sweep on the H100 (docs/perf-log.md, session 5): the split variants up to
 * 64 rows (one, two, four token tiles); beyond, 64 x 32 tiles for outputs up to 2048 wide and 256 rows, else
 * 64 x 128 tiles of 64 x 32 per warp with the slice sums in shared memory.
 */
export function defaultVariant(T: number, N = 0): GemmRowsVariant {
  if (T <= 64) return GEMM_ROWS_VARIANTS[T <= 8 ? 0 : T <= 16 ? 1 : 2]!;
  return GEMM_ROWS_VARIANTS[N <= 2048 && T <= 256 ? 3 : 4]!;
}

export function planGemmRows(T: number, N: number, K: number, variant = defaultVariant(T, N)): GemmRowsLaunch {
  if (K % 8 !== 0) throw new Error(`gemm_rows: K ${K} is not a multiple of 8`);
  const { kind, mt, nt } = variant;
  const chunks = sliceChunks(K);
  const tile = blockTile(variant);
  const grid: [number, number, number] = [Math.ceil(N / tile.rows), Math.ceil(T / tile.tokens), 1];
  if (kind === 'split') {
    const slices = numSlices(K);
    return { kernel: `gemm_rows_split_m${mt}_n${nt}`, grid, block: 32 * Math.min(variant.warps, slices),
      sharedBytes: slices * mt * nt * 4 * 32 * 4, sliceChunks: chunks };
  }
  return { kernel: `gemm_rows_tiled_w${variant.wm}x${variant.warps / variant.wm}_m${mt}_n${nt}`, grid,
    block: 32 * variant.warps, sliceChunks: chunks, sharedBytes: variant.stages * (tile.rows + tile.tokens) * 128
      + (variant.smemSum ? mt * nt * 4 * 32 * variant.warps * 4 : 0) };
}
