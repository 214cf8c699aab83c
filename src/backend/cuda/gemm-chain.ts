import { readKnob } from '../../knobs/knobs.js';
// Launch plans for kernels/gemm_chain.cu: decode GEMMs of up to 8 tokens summed in cuBLASLt's order (the same bits)
// unless their chains split k between warps (below: the longer chains on fewer warps, not the demo model's),
// streamed by one warp per 16 weight rows where there are tiles enough to keep every SM streaming (below that the ring
// falls behind cuBLASLt: docs/perf-log.md, session 10), else by one warp per 8 rows read whole before the kernel before
// has finished (gemm_chain_whole).

/** Most tokens a chain GEMM takes (one n8 tile). */
export const CHAIN_MAX_TOKENS = 8;
/** Stages of 64 k in a warp's ring (the kernel's CHAIN_STAGES: kernel-defines.ts). */
export const CHAIN_STAGES = 16;
/**
 * An FP8 chain of K >= FP8_SPLIT_FROM_K on a weight of fewer than FP8_SPLIT_BELOW_TILES_PER_SM tiles of 16 rows a SM
 * splits each tile's k between two warps (the _s2 builds): a long chain on few tiles is what the step waits on
 * (docs/perf-log.md, session 19). QUIRE_FP8_SPLIT_K moves the K.
 */
const FP8_SPLIT_FROM_K = readKnob('QUIRE_FP8_SPLIT_K');
const FP8_SPLIT_BELOW_TILES_PER_SM = 4;
/**
 * A bf16 ring chain of K >= BF16_SPLIT_FROM_K on a weight of fewer than FP8_SPLIT_BELOW_TILES_PER_SM tiles a SM splits
 * each tile's k between two warps too (the _s2 builds: rings of 8 stages a warp below K 4,096, so a block's shared
 * memory is the unsplit one's, 16 from there); its sums are then the two halves' added in order, not cuBLASLt's.
 * From 1,024: the demo model's ring GEMMs (K 256) keep cuBLASLt's bits, and so its transcripts their batch invariance.
 * QUIRE_CHAIN_SPLIT_K moves it (Infinity: never). qwen3-8b's qkv (384 tiles) would take two waves split, so the
 * backend keeps it whole (docs/perf-log.md, session 23).
 */
const BF16_SPLIT_FROM_K = readKnob('QUIRE_CHAIN_SPLIT_K');
/**
 * Tiles of 16 weight rows per SM below which the ring falls behind cuBLASLt (in the sweep: 1.0 loses, 1.9 wins); such
 * weights take gemm_chain_whole, which reads a warp's 8 rows whole before the kernel before has finished.
 */
const MIN_TILES_PER_SM = 1.5;
/**
 * Most shared memory a gemm_chain_whole block takes: what every GPU from sm_86 lets a block have (K 3,072 at 8 tokens),
 * and small enough to sit beside gate_up's chain blocks on an H100's SM so the next kernel's reads start early.
 */
const WHOLE_MAX_SHARED = 99 * 1024;
/**
 * Most tokens gemm_chain_whole takes (QUIRE_CHAIN_WHOLE; 0 sends narrow weights to cuBLASLt): all 8, once k splits
 * between warps (below; docs/perf-log.md, sessions 21 and 23).
 */
const WHOLE_MAX_TOKENS = readKnob('QUIRE_CHAIN_WHOLE');
/**
 * Most stages of 64 k one warp of gemm_chain_whole chains where K has more than WHOLE_UNSPLIT_STAGES: such a K splits
 * between 2 to 8 warps of the block, each summing a slice from zero, the slices added in order (not cuBLASLt's bits).
 * QUIRE_CHAIN_WHOLE_SPLIT moves it (0: never split; docs/perf-log.md, sessions 23 and 25).
 */
const WHOLE_SPLIT_STAGES = readKnob('QUIRE_CHAIN_WHOLE_SPLIT');
/** Stages of K gemm_chain_whole never splits: the demo model's K (<= 1,024), so its transcripts stay batch-invariant. */
const WHOLE_UNSPLIT_STAGES = 16;
/** Most warps a gemm_chain_whole block splits k between (the kernel's CHAIN_WHOLE_MAX_SPLIT). */
export const CHAIN_WHOLE_MAX_SPLIT = 8;

/**
 * Warps gemm_chain_whole splits `steps` stages of k between: none up to WHOLE_UNSPLIT_STAGES, else the fewest giving
 * equal slices of at most `most` (none where no 2 to 8 do).
 */
export function wholeSplit(steps: number, most = WHOLE_SPLIT_STAGES): number {
  if (!(most > 0) || steps <= Math.max(most, WHOLE_UNSPLIT_STAGES)) return 1;
  for (let s = Math.ceil(steps / most); s <= CHAIN_WHOLE_MAX_SPLIT; s++) if (steps % s === 0) return s;
  return 1;
}

/**
 * K from which a chain reads 8 stages of weights before the kernel before has finished, not 4 (the _p8 builds): only
 * long chains gain from it (docs/perf-log.md, session 15). QUIRE_CHAIN_EARLY8_K moves it.
 */
const EARLY8_FROM_K = readKnob('QUIRE_CHAIN_EARLY8_K');

/**
 * How gate_up's chain kernel applies silu_mul: not at all ('none': gate_up's [T, N] out, then silu_mul's node), or as
 * 'pairs' (gemm_chain_silu_pair: a warp's tile is 8 gate rows and the same 8 up rows, N / 16 warps as in the plain
 * chain), the default: silu_mul's node saved, every warp streaming (docs/perf-log.md, session 20).
 */
export type ChainSilu = 'none' | 'pairs';

export interface ChainGemmLaunch {
  kernel: `${'gemm_chain' | 'gemm_chain_silu_pair'}${'' | '_fp8'}${'' | '_p8'}${'' | '_s2'}`
    | `gemm_chain_whole${'' | '_split'}`;
  grid: [number, number, number];
  block: number;
  sharedBytes: number;
}

/**
 * The chain kernel for y[T, N] = x[T, K] w[N, K]^T (or, silu not 'none', silu(gate) * up of w's two halves), or null
 * where it does not apply or would be slower than cuBLASLt. fp8: block-FP8 weights and quantized tokens (the _fp8
 * builds: stages of 128 k, their scales in shared memory), taken at any width: cuBLASLt's block-scaled GEMM is slower
 * than the chain for few tokens on every qwen3 shape (docs/perf-log.md, session 19). splitK false: no _s2 build.
 */
export function planChainGemm(T: number, N: number, K: number, numSMs: number, silu: ChainSilu = 'none', fp8 = false,
  splitK = true, early8 = true): ChainGemmLaunch | null {
  if (T < 1 || T > CHAIN_MAX_TOKENS || K % (fp8 ? 128 : 64) !== 0) return null;
  // silu: the halves are whole 8-row pairs; FP8 halves are whole 128-row blocks
  if (N % 16 !== 0 || (fp8 && silu === 'pairs' && N % 256 !== 0)) return null;
  if (!fp8 && N / 16 < MIN_TILES_PER_SM * numSMs) {
    const sharedBytes = (K / 64) * (64 + 8 * T) * 16;
    const split = wholeSplit(K / 64);
    return T <= WHOLE_MAX_TOKENS && silu === 'none' && sharedBytes <= WHOLE_MAX_SHARED
      ? { kernel: split > 1 ? 'gemm_chain_whole_split' : 'gemm_chain_whole', grid: [N / 8, 1, 1], block: 32 * split,
        sharedBytes } : null;
  }
  const scaleRows = silu === 'pairs' ? 2 : 1;  // FP8: 128-row weight blocks a warp's rows touch
  // early8 false (gemm.ts chainPlan, QUIRE_CHAIN_SHORT_RING): a bf16 split takes 8-stage rings whatever its K
  const early = K >= EARLY8_FROM_K && (early8 || fp8) ? '_p8' : '';
  // long chains of narrow weights split their k between two warps (the _s2 builds; FP8_SPLIT_FROM_K, BF16_SPLIT_FROM_K)
  const split = splitK && N / 16 < FP8_SPLIT_BELOW_TILES_PER_SM * numSMs && (fp8
    ? silu === 'none' && K >= FP8_SPLIT_FROM_K && (K / 128) % 2 === 0
    : K >= BF16_SPLIT_FROM_K && (K / 64) % 2 === 0) ? 2 : 1;
  const steps = K / 128 / split;
  const scaleBytes = fp8 ? Math.ceil(steps * (8 + scaleRows) / 4) * 16 : 0;
  const stages = !fp8 && split > 1 && !early ? CHAIN_STAGES / 2 : CHAIN_STAGES;
  const name = silu === 'pairs' ? 'gemm_chain_silu_pair' : 'gemm_chain';
  return { kernel: `${name}${fp8 ? '_fp8' : ''}${early}${split > 1 ? '_s2' : ''}`,
    grid: [N / 16, 1, 1], block: 32 * split, sharedBytes: split * (stages * (128 + 64) * 16 + scaleBytes) };
}

/**
 * Hidden sizes from which a layer's norms run inside its chain GEMMs (cuda-backend.ts matmulAddRmsNorm; kernels/
 * gemm_chain.cu's ChainNormOut / ChainNormIn): from 1,024, so the demo model (hidden 256) keeps its norm kernels and
 * so its bits (QUIRE_CHAIN_NORM=0 turns it off everywhere).
 */
export const CHAIN_NORM_FROM_HIDDEN = 1024;

/**
 * Whether a chain launch can add its outputs into the residual and write them normed but for the norm's scale (a
 * producer: a bf16 build of one output per row whose grid is a multiple of 4 blocks, as the consumer copies the
 * blocks' sums 16 bytes at a time), or can take such an input and apply the scale (a consumer: the bf16 ring builds,
 * plain or silu_pair).
 */
export function chainNormRole(plan: ChainGemmLaunch): { producer: boolean; consumer: boolean } {
  const bf16 = !plan.kernel.includes('_fp8');
  const whole = plan.kernel.startsWith('gemm_chain_whole');
  return { producer: bf16 && !plan.kernel.includes('silu') && plan.grid[0] % 4 === 0, consumer: bf16 && !whole };
}

/** Shared memory a consumer's launch adds for the producer's parts: T rows of numParts floats. */
export function chainNormPartsBytes(T: number, numParts: number): number {
  return Math.ceil((T * numParts * 4) / 16) * 16;
}
