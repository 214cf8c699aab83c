// How a GGUF GEMV launch (kernels/gguf.cu's gguf_gemv) lays a segment's rows on the GPU: how many of a block's warps
// share each row (`split`: they take its 32-weight pieces in turn and their sums meet in shared memory), so the
// block's rows and the grid follow.
//
// The rule. A GEMV step is a stream over the weight: it reaches the copy bandwidth only with enough bytes in flight
// on every SM (Little's law: an H200 SM's share of 4.8 TB/s times ~1.5 us of loaded latency is ~55 KB), and a warp
// keeps DEPTH x ROWS pieces a lane in flight (2 KB to 6 KB a warp), so the launch wants some 32 warps a SM: 4096 on
// 132 SMs (GGUF_GEMV_TARGET_WARPS). One warp a row pair gives rows / 2 warps: 12288 for an 8B model's gate_up, but
// 2048 for o and down (4096 rows) and 512 for qkv's 1024-row v segment, which then read at a quarter of the
// bandwidth (session 34: qkv and o at 24% against gate_up's 56%). Splitting each row among 2 or 4 warps multiplies
// the warps by that much with the same bytes: the smallest split reaching the target, at most GGUF_GEMV_WARPS, and
// no more than leaves every lane a piece (K / 1024). A split depends on the segment's shape only, never on the step's
// tokens, so a token's sums are in the same order alone and in a step of others.

import { GGUF_GEMV_ROWS, GGUF_GEMV_WARPS } from './gguf-layout.js';

/** The warps a GEMV launch is given at least, where its rows allow (see above). */
export const GGUF_GEMV_TARGET_WARPS = 4096;

export interface GgufGemvLaunch {
  /** Warps sharing each row (1, 2 or 4): the kernel's `split`. */
  split: number;
  /** Rows a block of GGUF_GEMV_WARPS warps takes. */
  rowsPerBlock: number;
  grid: number;
}

/** The launch for `rows` weight rows of K values; `forced` (QUIRE_GGUF_GEMV_SPLIT) overrides the rule's split. */
export function ggufGemvLaunch(rows: number, K: number, forced: 'auto' | '1' | '2' | '4' = 'auto'): GgufGemvLaunch {
  const split = forced === 'auto' ? ggufGemvSplit(rows, K) : Number(forced);
  const rowsPerBlock = (GGUF_GEMV_WARPS / split) * GGUF_GEMV_ROWS;
  return { split, rowsPerBlock, grid: Math.ceil(rows / rowsPerBlock) };
}

/** The rule's split for a segment of `rows` rows of K values (K a multiple of 32). */
export function ggufGemvSplit(rows: number, K: number): number {
  const warps = Math.ceil(rows / GGUF_GEMV_ROWS);
  const maxSplit = Math.min(GGUF_GEMV_WARPS, Math.max(1, Math.floor(K / 32 / 32)));
  let split = 1;
  while (split * 2 <= maxSplit && warps * split < GGUF_GEMV_TARGET_WARPS) split *= 2;
  return split;
}
