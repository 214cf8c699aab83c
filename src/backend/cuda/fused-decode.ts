// Launch plan of kernels/decode_layers.cu: every layer of a one-token decode step in one persistent kernel,
// the batch-invariant mode's single stream. Its stages run the op path's own device functions, so it gives the
// op-by-op path's bits; this file decides when it applies and lays out its buffers.

import type { LayerWeights } from '../../model/weights.js';
import { evenGroup, MAX_SPLITS } from './decode-splits.js';
import type { Device, PinnedBuffer } from './device.js';
import { numSlices } from './gemm-rows.js';

/** Threads of the fused kernel's blocks: those of the attention and rope blocks, and of norm rows up to 4096. */
export const FUSED_THREADS = 128;
/** Blocks per SM (FUSED_BLOCKS_PER_SM): the grid must be co-resident, and more warps keep more bytes in flight. */
export const FUSED_BLOCKS_PER_SM = 2;
/** Shared memory per warp for its GEMM stream (GEMV_RING_BYTES). */
const GEMV_RING_BYTES = 16 * 1024;
/** Device pointers per layer in the kernel's table (LAYER_PTRS). */
export const LAYER_PTRS = 10;
/** Tile counters start at this int32 in the counter buffer; the barrier counter sits alone before them. */
const TILE_COUNTERS = 32;
const HEAD_DIMS = [64, 128];

export interface FusedShape {
  hidden: number;
  inter: number;
  numHeads: number;
  numKvHeads: number;
  headDim: number;
}

export interface FusedPlan {
  kernel: string;
  grid: number;
  sharedBytes: number;
  /** Grid z of the attention stage's virtual grid (which blocks share a row's splits; changes no bit). */
  attnZ: number;
  /** bf16 elements of the scratch buffer: qkv | attn | o | silu(gate) * up | mlp. */
  scratchElements: number;
  /** Where the last layer's mlp output starts in the scratch buffer (elements). */
  mlpOffset: number;
  partialBytes: number;
  counterBytes: number;
}

/** The stages of a layer, in order, each ending at a grid barrier. */
export const FUSED_STAGES = ['qkv', 'rope', 'attention', 'o', 'gate_up', 'down'] as const;

export interface StageTime {
  stage: (typeof FUSED_STAGES)[number];
  /** Summed over the layers: from the previous barrier's last release to this one's. */
  spanNs: number;
  /** Of that, until the last block arrived (its work); the rest is the barrier. */
  workNs: number;
}

/**
 * The kernel's timeline (QUIRE_FUSED_TIMELINE=1): stamps [barrier][block][arrival, release] in ns, one barrier per
 * stage and layer. Per stage, summed over the layers after the first (the first stage has no barrier before it).
 */
export function stageTimes(stamps: BigUint64Array, numBlocks: number, numLayers: number): StageTime[] {
  const times = FUSED_STAGES.map((stage) => ({ stage, spanNs: 0, workNs: 0 }));
  const last = (b: number, which: 0 | 1) => {
    let most = 0n;
    for (let k = 0; k < numBlocks; k++) {
      const t = stamps[(b * numBlocks + k) * 2 + which]!;
      if (t > most) most = t;
    }
    return most;
  };
  for (let b = 1; b < numLayers * FUSED_STAGES.length; b++) {
    const from = last(b - 1, 1);
    const t = times[b % FUSED_STAGES.length]!;
    t.spanNs += Number(last(b, 1) - from);
    t.workNs += Number(last(b, 0) - from);
  }
  return times;
}

/** Query heads a fused layer's attention block serves (G in decode_layers.cu): the largest of 8, 4, 2, 1 dividing H / KVH. */
export function groupOf(numHeads: number, numKvHeads: number): number {
  return evenGroup(numHeads, numKvHeads);
}

/** Why the fused kernel cannot run this shape, or null. */
export function fusedUnsupported(s: FusedShape): string | null {
  if (!HEAD_DIMS.includes(s.headDim)) return `head dim ${s.headDim} (fused: ${HEAD_DIMS.join(', ')})`;
  if (s.hidden % 8 !== 0 || s.hidden > 8 * FUSED_THREADS * 4) return `hidden ${s.hidden} (fused: a multiple of 8 up to 4096)`;
  if (s.inter % 16 !== 0) return `intermediate ${s.inter} (fused: a multiple of 16)`;
  if (s.numHeads % s.numKvHeads !== 0) return `${s.numHeads} heads over ${s.numKvHeads} kv heads`;
  return null;
}

/** The plan for `blocksPerSM` co-resident blocks per SM (at most FUSED_BLOCKS_PER_SM: what the kernel is built for). */
export function planFusedDecode(s: FusedShape, numSMs: number, blocksPerSM = FUSED_BLOCKS_PER_SM): FusedPlan {
  const why = fusedUnsupported(s);
  if (why) throw new Error(`fused decode: ${why}`);
  const grid = Math.min(blocksPerSM, FUSED_BLOCKS_PER_SM) * numSMs;
  if (grid < 1) throw new Error('fused decode: no block fits an SM');
  const qkvWidth = (s.numHeads + 2 * s.numKvHeads) * s.headDim;
  const attnRows = s.numHeads / groupOf(s.numHeads, s.numKvHeads);
  const gemms: [number, number][] = [[qkvWidth, s.hidden], [s.hidden, s.numHeads * s.headDim], [2 * s.inter, s.hidden],
    [s.hidden, s.inter]];
  const maxTiles = Math.max(...gemms.map(([n]) => Math.ceil(n / 16)));
  const maxItems = Math.max(...gemms.map(([n, k]) => Math.ceil(n / 16) * numSlices(k)));
  return {
    kernel: `decode_layers_d${s.headDim}_g${groupOf(s.numHeads, s.numKvHeads)}`,
    grid,
    sharedBytes: Math.ceil((s.hidden * 2) / 16) * 16 + (FUSED_THREADS / 32) * GEMV_RING_BYTES,
    attnZ: Math.max(1, Math.min(MAX_SPLITS, Math.floor(grid / attnRows))),
    scratchElements: qkvWidth + s.numHeads * s.headDim + 2 * s.hidden + s.inter,
    mlpOffset: qkvWidth + s.numHeads * s.headDim + s.hidden + s.inter,
    partialBytes: maxItems * 16 * 4,
    counterBytes: (TILE_COUNTERS + maxTiles) * 4,
  };
}

/**
 * The fused kernel's device state: the per-layer pointer table (rebuilt when the weights or the KV cache change)
 * and the plan per shape.
 */
export class FusedDecodeState {
  private table: { ptr: bigint; layers: readonly LayerWeights[]; kvGeneration: number } | null = null;
  /** Per shape: its plan, or null where the kernel has no instantiation for it or no block fits an SM. */
  private readonly plans = new Map<string, FusedPlan | null>();

  constructor(private readonly device: Device) {}

  /** The plan for this shape (a barrier waits for every block: never more blocks than fit the SMs at once). */
  plan(shape: FusedShape): FusedPlan | null {
    const key = `${shape.hidden} ${shape.inter} ${shape.numHeads} ${shape.numKvHeads} ${shape.headDim}`;
    let plan = this.plans.get(key);
    if (plan === undefined) {
      plan = null;
      if (!fusedUnsupported(shape)) {
        const { kernel, sharedBytes } = planFusedDecode(shape, this.device.numSMs);
        const fits = this.device.blocksPerSM('decode_layers.cu', kernel, FUSED_THREADS, sharedBytes);
        if (fits >= 1) plan = planFusedDecode(shape, this.device.numSMs, fits);
      }
      this.plans.set(key, plan);
    }
    return plan;
  }

  /**
   * Device table of every layer's weight and KV cache pointers (LAYER_PTRS each, in the kernel's LP_* order);
   * `ptrOf` gives a weight's device pointer (0 for none), `kvOf` a layer's K and V pages.
   */
  layerTable(layers: readonly LayerWeights[], kvGeneration: number, ptrOf: (w: LayerWeights[keyof LayerWeights]) => bigint,
    kvOf: (layer: number) => { k: bigint; v: bigint }): bigint {
    if (this.holds(layers, kvGeneration)) return this.table!.ptr;
    const words = new BigUint64Array(layers.length * LAYER_PTRS);
    layers.forEach((l, i) => {
      const { k, v } = kvOf(i);
      words.set([ptrOf(l.inputNorm), ptrOf(l.qkv), ptrOf(l.qNorm), ptrOf(l.kNorm), ptrOf(l.o), ptrOf(l.postAttentionNorm),
        ptrOf(l.gateUp), ptrOf(l.down), k, v], i * LAYER_PTRS);
    });
    this.dispose();
    const p = this.device.alloc(words.byteLength);
    this.device.upload(p, words);
    this.table = { ptr: p, layers, kvGeneration };
    return p;
  }

  /** Whether layerTable() would return the table it holds (no upload). */
  holds(layers: readonly LayerWeights[], kvGeneration: number): boolean {
    return this.table?.layers === layers && this.table.kvGeneration === kvGeneration;
  }

  /** Timeline stamps read back from the device, and the stage times summed over the steps read so far. */
  private stamps: { buffer: PinnedBuffer; bytes: number } | null = null;
  private readonly totals = FUSED_STAGES.map(() => ({ spanNs: 0, workNs: 0 }));
  private numTimedLayers = 0;
  private numTimedSteps = 0;

  /** Bytes of the timeline a launch of `plan` over `numLayers` layers writes. */
  static timelineBytes(plan: FusedPlan, numLayers: number): number {
    return FUSED_STAGES.length * numLayers * plan.grid * 16;
  }

  /**
   * Reads the timeline the launch just written at `src` (waits for it) and adds it to the totals; every
   * `every` steps logs the stages' mean time per layer.
   */
  readTimeline(src: bigint, plan: FusedPlan, numLayers: number, log: (text: string) => void, every = 32): void {
    const bytes = FusedDecodeState.timelineBytes(plan, numLayers);
    if (!this.stamps || this.stamps.bytes < bytes) {
      if (this.stamps) this.device.hostFree(this.stamps.buffer);
      this.stamps = { buffer: this.device.hostAlloc(bytes), bytes };
    }
    this.device.copyToHostAsync(this.stamps.buffer, src, bytes);
    this.device.synchronize();
    const words = new BigUint64Array(this.stamps.buffer.view, 0, bytes / 8);
    stageTimes(words, plan.grid, numLayers).forEach((t, i) => {
      this.totals[i]!.spanNs += t.spanNs;
      this.totals[i]!.workNs += t.workNs;
    });
    this.numTimedLayers += numLayers - 1;
    if (++this.numTimedSteps % every !== 0) return;
    const us = (ns: number) => (ns / this.numTimedLayers / 1000).toFixed(2).padStart(8);
    log([`fused decode, ${this.numTimedSteps} steps: us per layer (span = last block's work + barrier)`,
      ...FUSED_STAGES.map((stage, i) => `${stage.padEnd(10)} span ${us(this.totals[i]!.spanNs)}  work ${us(this.totals[i]!.workNs)}`)]
      .join('\n'));
  }

  dispose(): void {
    if (this.stamps) this.device.hostFree(this.stamps.buffer);
    this.stamps = null;
    if (!this.table) return;
    this.device.synchronize();
    this.device.free(this.table.ptr);
    this.table = null;
  }
}
