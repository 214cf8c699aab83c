// qk-norm + rope, KV writes and paged attention on the device. One-token rows (decode rows, also those of a mixed
// step) go through the decode kernel, so a decode row's bits do not depend on whether prompt chunks share its step;
// the prefill kernel takes the other rows' tiles. A decode-only step's qk-norm + rope + KV write runs inside the
// decode attention kernel (fusedRope): qkNormRope then only leaves its parameters for attention(). Partial rotary
// (Qwen3.5) takes the same kernels: invFreq padded with zeros to headDim / 2 and the rotated pairs passed along
// (kernels/rope.cuh).

import { readKnob } from '../../knobs/knobs.js';
import type { RopeSpec, StepInputs, Tensor } from '../backend.js';
import { DECODE_MMA_HEAD_DIMS, type DecodeMma, decodeAsDependent, decodeSplitCap, launchDecodeAttention,
  launchPrefillAttention, mmaFromGroup, type DecodeRope, verifyAsDecode } from './attention-launch.js';
import { decodeGridZ, decodeGroup, GROUP_FILL, MAX_SPLITS, maxSplitsOf, MMA_GROUP_FILL, MMA_MAX_SPLITS, splitStateRows }
  from './decode-splits.js';
import { f32, i32, ptr, type KernelArg } from './device.js';
import { ROPE_WARPS } from './kernel-defines.js';
import type { KvMemory } from './kv-memory.js';
import { MAX_DECODE_ROWS_PER_TOKEN, metaPtr } from './step-buffers.js';
import type { StepContext } from './step-context.js';
import { asCuda, type CudaTensor } from './tensor.js';
import type { CudaWeights } from './weights.js';

export interface AttentionOptions {
  batchInvariant: boolean;
  /** A decode-only step's qk-norm + rope + kv write inside the decode attention kernel (QUIRE_FUSED_ROPE). */
  fusedRope?: boolean;
  /** Decode attention's rounds on tensor cores where the cache allows (QUIRE_DECODE_MMA; AttentionLaunch.decodeMma). */
  decodeMma?: DecodeMma;
  /** Most splits of a row on the _mma builds (QUIRE_DECODE_MMA_MAX_SPLITS). */
  mmaMaxSplits?: number;
  /** Verify steps of up to this many sequences attend on the decode kernel (QUIRE_VERIFY_DECODE_MAX_SEQS). */
  verifyDecodeMaxSeqs?: number;
}

export class CudaAttention {
  /** The kernels' dtype suffix: the compute type, then _fp8 for an FP8 cache (qk_norm_rope_bf16_fp8, ...). */
  private readonly kvKernels: string;
  /** An FP8 cache's decode blocks serve at most 2 query heads and load 16 e4m3 a lane (the _fp8x16 builds). */
  private readonly fp8DecodeX16: boolean;
  private readonly batchInvariant: boolean;
  private readonly fusedRope: boolean;
  /** The _mma decode builds for a bf16 cache of head dim 64 or 128 (DECODE_MMA_HEAD_DIMS); others keep the plain ones. */
  private readonly decodeMma: DecodeMma;
  private readonly mmaMaxSplits: number;
  private readonly verifyDecodeMaxSeqs: number;
  /** Most splits of a row in any of this backend's launches: the split states' stride in their buffers. */
  private readonly mostSplits: number;
  private readonly invFreqs = new Map<Float32Array, bigint>();
  /** The qkv buffer and layer whose k, v qkNormRope already wrote to the cache this step. */
  private kvWrittenFor: { qkv: bigint; layer: number } | null = null;
  /** qkNormRope's launch left to the decode attention kernel of the same qkv buffer and layer (fusedRope). */
  private ropeForAttention: { qkv: bigint; layer: number; rope: DecodeRope } | null = null;
  /** The most splits of a decode row in the graph being captured (its kv-length class; Infinity: the launch's cap). */
  captureSplits = Infinity;
  /** Layers whose qk-norm + rope ran inside the decode attention kernel (fusedRope). */
  numFusedRopes = 0;

  constructor(private readonly s: StepContext, private readonly kv: KvMemory, private readonly weights: CudaWeights,
    fp8Cache: boolean, o: AttentionOptions) {
    this.kvKernels = fp8Cache ? 'bf16_fp8' : 'bf16';
    this.fp8DecodeX16 = fp8Cache;
    this.batchInvariant = o.batchInvariant;
    this.fusedRope = o.fusedRope ?? readKnob('QUIRE_FUSED_ROPE');
    // 'groups' picks the kernel by the step's G, which follows its batch: not in the batch-invariant mode
    const mma = o.decodeMma ?? readKnob('QUIRE_DECODE_MMA');
    this.decodeMma = fp8Cache || (o.batchInvariant && mma === 'groups') ? 'off' : mma;
    this.mmaMaxSplits = o.mmaMaxSplits ?? MMA_MAX_SPLITS;
    this.verifyDecodeMaxSeqs = o.verifyDecodeMaxSeqs ?? readKnob('QUIRE_VERIFY_DECODE_MAX_SEQS');
    this.mostSplits = this.decodeMma === 'off' ? MAX_SPLITS : Math.max(MAX_SPLITS, this.mmaMaxSplits);
  }

  /** A new step: nothing of the last one's qkv is pending. */
  beginStep(): void {
    this.kvWrittenFor = null;
  }

  /**
   * rope.invFreq on the device, zeros appended to headDim / 2 (partial rotary): a pass-through pair's angle is then 0,
   * its cos 1 and sin 0 exactly, and the kernels treat every pair alike (kernels/rope.cuh).
   */
  private invFreqPtr(rope: RopeSpec): bigint {
    let p = this.invFreqs.get(rope.invFreq);
    if (p === undefined) {
      if (this.s.capturing) throw new Error('rope table first seen during graph capture');
      const padded = new Float32Array(rope.headDim / 2);
      padded.set(rope.invFreq);
      p = this.s.device.alloc(padded.byteLength);
      this.s.device.upload(p, padded);
      this.invFreqs.set(rope.invFreq, p);
      this.weights.track(p);
    }
    return p;
  }

  /**
   * The step's rope angles (kernels/rope.cu rope_table): computed by the step's first qkNormRope, read by
   * every layer's.
   */
  private ropeTable(invFreq: bigint, numTokens: number, half: number, positions: KernelArg): bigint {
    const cur = this.s.current!;
    if (cur.ropeTable?.invFreq === invFreq) return cur.ropeTable.ptr;
    const table = this.s.workspace.allocForStep(numTokens * 2 * half * 4);
    this.s.device.launch('rope.cu', 'rope_table', [Math.ceil((numTokens * half) / 256), 1, 1], 256,
      [ptr(invFreq), positions, ptr(table), i32(numTokens), i32(half)], 0, true);
    cur.ropeTable = { invFreq, ptr: table };
    return table;
  }

  qkNormRope(qkv: Tensor, qNorm: Tensor | null, kNorm: Tensor | null, eps: number, numHeads: number,
    numKvHeads: number, rope: RopeSpec, step: StepInputs, kvLayer?: number): void {
    const { batch, packed, meta, layout } = this.s.of(step);
    const q = asCuda(qkv);
    const D = rope.headDim;
    if (D % 64 !== 0 || D > 256) throw new Error(`qkNormRope: head dim ${D} is not a multiple of 64 up to 256`);
    const rotPairs = rope.invFreq.length;
    if (rotPairs < 1 || 2 * rotPairs > D) throw new Error(`qkNormRope: ${2 * rotPairs} rotary channels in a head of ${D}`);
    const applyNorm = qNorm !== null && kNorm !== null;
    const invFreq = this.invFreqPtr(rope);
    const cache = kvLayer === undefined ? { k: 0n, v: 0n } : this.kv.layer(kvLayer);
    const T = batch.numTokens;
    const grid: [number, number, number] = [T, Math.ceil((numHeads + numKvHeads) / ROPE_WARPS), 1];
    const positions = ptr(metaPtr(meta, layout.positions));
    // A decode-only step's rows all go to the decode kernel (attention()): it ropes them itself.
    const fuse = this.fusedRope && kvLayer !== undefined && packed.decodeOnly && packed.numDecodeRows === T;
    this.s.timed('rope', () => {
      const table = this.ropeTable(invFreq, T, D / 2, positions);
      if (fuse) {
        this.ropeForAttention = { qkv: q.ptr, layer: kvLayer, rope: { table, eps, rotPairs,
          qNorm: applyNorm ? asCuda(qNorm).ptr : 0n, kNorm: applyNorm ? asCuda(kNorm).ptr : 0n } };
        this.numFusedRopes++;
        return;
      }
      this.s.device.launch('rope.cu', `qk_norm_rope_${this.kvKernels}`, grid, ROPE_WARPS * 32, [ptr(q.ptr),
        ptr(qNorm ? asCuda(qNorm).ptr : 0n), ptr(kNorm ? asCuda(kNorm).ptr : 0n), i32(applyNorm ? 1 : 0), ptr(invFreq),
        positions, ptr(cache.k), ptr(cache.v), ptr(metaPtr(meta, layout.slotMapping)), i32(numHeads),
        i32(numKvHeads), i32(D), i32(rotPairs), f32(eps), ptr(table)], 0, true);
    });
    this.kvWrittenFor = kvLayer === undefined ? null : { qkv: q.ptr, layer: kvLayer };
  }

  /**
   * Grid z of the decode kernel for `numRows` (token, head) rows. Every row's splits follow its own kv length
   * (decode-splits.ts), so this changes how blocks share the work, never a result.
   */
  decodeSplits(numRows: number, maxRowSplits: number, maxSplits = MAX_SPLITS): number {
    return decodeGridZ(numRows, this.s.device.numSMs, maxRowSplits, maxSplits);
  }

  attention(qkv: Tensor, layer: number, numHeads: number, numKvHeads: number, scale: number,
    step: StepInputs): CudaTensor {
    const { batch, packed, meta, layout } = this.s.of(step);
    const q = asCuda(qkv);
    const { k, v, spec } = this.kv.layer(layer);
    const D = q.shape[1]! / (numHeads + 2 * numKvHeads);
    if (D !== spec.headDim) throw new Error(`attention: head dim ${D}, cache has ${spec.headDim}`);
    const T = batch.numTokens;
    const L = layout;
    const out = this.s.act([T, numHeads * D]);
    const kvWritten = this.kvWrittenFor?.qkv === q.ptr && this.kvWrittenFor.layer === layer;
    this.kvWrittenFor = null;
    const fused = this.ropeForAttention;
    this.ropeForAttention = null;
    if (fused && (fused.qkv !== q.ptr || fused.layer !== layer)) {
      throw new Error(`attention: layer ${layer} follows the fused rope of layer ${fused.layer} (another qkv)`);
    }
    this.s.timed('attention', () => {
      if (!kvWritten) {
        this.s.device.launch('kv_write.cu', `kv_write_${this.kvKernels}`, [T, 1, 1], 256, [ptr(q.ptr), ptr(k), ptr(v),
          ptr(metaPtr(meta, L.slotMapping)), i32(numHeads), i32(numKvHeads), i32(D)]);
      }
      // The batch-invariant mode runs every row through the decode kernel: a row's result then follows its own kv
      // length alone, whatever chunk or step it came in.
      const decodeMma = DECODE_MMA_HEAD_DIMS.includes(D) ? this.decodeMma : 'off';
      const launch = { qkv: q.ptr, k, v, out: out.ptr, meta: meta.device, layout: L, numHeads, numKvHeads, headDim: D,
        blockSize: spec.blockSize, scale, kvKernels: this.kvKernels, decodeX16: this.fp8DecodeX16, decodeMma };
      // so do a verify step's few rows (verifyAsDecode), for their speed
      const allTokens = this.batchInvariant || verifyAsDecode(batch, this.verifyDecodeMaxSeqs);
      const decodeRows = allTokens ? T : packed.numDecodeRows;
      if (decodeRows < T) launchPrefillAttention(this.s.device, launch, packed.numTiles);
      if (decodeRows > 0) {
        // A graph replays with longer kv lengths than it was captured with: it plans for the most splits of its class.
        // The rows' splits at the larger cap: at a smaller one a row has at most min(cap, these) (splitPlan).
        const rowSplits = this.s.capturing ? this.captureSplits : this.s.current!.decodeMaxSplits ??=
          maxSplitsOf(batch.positions, meta.words.subarray(L.rowOrder, L.rowOrder + decodeRows), this.mostSplits);
        // whole groups on the tensor cores keep from fewer blocks (MMA_GROUP_FILL): their walk reads K and V once
        const G = decodeGroup(decodeRows, numHeads, numKvHeads, this.s.device.numSMs, D, this.fp8DecodeX16 ? 2 : 8,
          rowSplits, GROUP_FILL, mmaFromGroup(decodeMma), MMA_GROUP_FILL, this.mmaMaxSplits);
        if (numHeads / G > MAX_DECODE_ROWS_PER_TOKEN) throw new Error(`attention: ${numHeads} heads exceed the decode row counters`);
        // Blocks publish split states only when the grid may give a row several blocks; the test, as the cap, is a
        // function of the row count alone, so eager and captured steps of one size allocate alike.
        const numRows = decodeRows * (numHeads / G);
        const maxSplits = decodeSplitCap(G, decodeMma, numRows, this.s.device.numSMs, this.mmaMaxSplits);
        const mayShare = this.decodeSplits(numRows, maxSplits, maxSplits) > 1;
        // rows of tokens (up to capTokens; the batch-invariant mode's, a verify step's): theirs from the workspace
        const partials = !allTokens
          ? this.s.steps.partials(meta, numHeads, D, splitStateRows(meta.layout.capSeqs, this.s.device.numSMs,
            this.decodeMma === 'off' ? null : this.mmaMaxSplits), this.s.capturing)
          : !mayShare ? { out: 0n, ml: 0n }
          : { out: this.s.act([decodeRows, numHeads, maxSplits, D], 'f32').ptr,
            ml: this.s.act([decodeRows, numHeads, maxSplits, 2], 'f32').ptr };
        launchDecodeAttention(this.s.device, launch, { G, rows: decodeRows, maxSplits,
          gridZ: this.decodeSplits(numRows, Math.min(rowSplits, maxSplits), maxSplits),
          partialOut: partials.out, partialMl: partials.ml, rowCounters: meta.rowCounters,
          dependent: decodeAsDependent(allTokens, packed.decodeOnly) }, fused?.rope);
      }
    });
    return out;
  }
}
