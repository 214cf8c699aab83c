// Gated DeltaNet on the CPU, the reference of its GPU kernels: the causal depthwise conv1d with its per-sequence
// window, the gated delta rule in its recurrent form (token by token: the exact definition, which the chunked form
// only regroups), the gated RMSNorm, and the per-sequence states they keep between steps.
//
// A sequence's state lives in a slot (ForwardBatch.stateSlots); a chunk that starts at position 0 starts from
// zeros, so a new or recomputed (preempted) sequence never reads what its slot held before. Each sequence's
// arithmetic reads only its own rows and state: the ops are batch-invariant like the rest of the backend.

import { bf16BitsToF32, f32ToBf16Bits } from '../../loader/dtype.js';
import type { ForwardBatch } from '../batch.js';
import { convChannels, type DeltaNetShape, type RecurrentStateLayout } from '../backend.js';

/** The conv windows and delta-rule states of every recurrent layer, a slot per sequence. */
export class RecurrentStates {
  /** Per layer: [numSlots, K - 1, C], the last K - 1 conv inputs, oldest first. */
  readonly conv: Float32Array[];
  /** Per layer: [numSlots, Hv, Dk, Dv]. */
  readonly ssm: Float32Array[];
  readonly convSize: number;
  readonly ssmSize: number;

  constructor(readonly layout: RecurrentStateLayout) {
    const s = layout.shape;
    this.convSize = (s.convKernel - 1) * convChannels(s);
    this.ssmSize = s.numValueHeads * s.keyDim * s.valueDim;
    this.conv = Array.from({ length: layout.numLayers }, () => new Float32Array(layout.numSlots * this.convSize));
    this.ssm = Array.from({ length: layout.numLayers }, () => new Float32Array(layout.numSlots * this.ssmSize));
  }

  /** Bytes of state one sequence holds over every layer (f32 here, whatever the values are rounded to). */
  get bytesPerSlot(): number {
    return RecurrentStates.bytesPerSlotOf(this.layout);
  }

  /** bytesPerSlot of a layout, before any array is made (the CPU backend checks its budget first). */
  static bytesPerSlotOf(layout: RecurrentStateLayout): number {
    const s = layout.shape;
    return 4 * layout.numLayers * ((s.convKernel - 1) * convChannels(s) + s.numValueHeads * s.keyDim * s.valueDim);
  }

  /** Slot src's windows and states over slot dst's, every layer (Backend.copyRecurrentState). */
  copySlot(src: number, dst: number): void {
    const n = this.layout.numSlots;
    if (!(Number.isInteger(src) && Number.isInteger(dst) && src >= 0 && dst >= 0 && src < n && dst < n)) {
      throw new Error(`copyRecurrentState: slots ${src} -> ${dst} outside the ${n} allocated`);
    }
    if (src === dst) return;
    for (const [stores, size] of [[this.conv, this.convSize], [this.ssm, this.ssmSize]] as const) {
      for (const a of stores) a.copyWithin(dst * size, src * size, (src + 1) * size);
    }
  }
}

export { convChannels };

/** Sequence i's rows [start, end), its first position, and its slot (-1: none). */
function seqRange(batch: ForwardBatch, i: number): { start: number; end: number; pos0: number; slot: number } {
  const start = batch.queryStartLoc[i]!;
  const end = batch.queryStartLoc[i + 1]!;
  return { start, end, pos0: batch.seqLens[i]! - (end - start), slot: batch.stateSlots?.[i] ?? -1 };
}

/**
 * The state of sequence i in `store` ([numSlots, size]): the slot's own (zeroed at position 0), or a fresh zero
 * state where the sequence has no slot (a padding row; a continuing sequence without one is an error).
 */
function stateOf(store: Float32Array | null, size: number, batch: ForwardBatch, i: number): Float32Array {
  const { pos0, slot } = seqRange(batch, i);
  if (slot < 0 || store === null) {
    if (pos0 > 0) throw new Error(`recurrent state: sequence ${i} continues at position ${pos0} but has no state slot`);
    return new Float32Array(size);
  }
  if ((slot + 1) * size > store.length) throw new Error(`recurrent state: slot ${slot} outside the ${store.length / size} allocated`);
  const state = store.subarray(slot * size, (slot + 1) * size);
  if (pos0 === 0) state.fill(0);
  return state;
}

const silu = (v: number): number => v / (1 + Math.exp(-v));

/** out [T, C] = silu(causal depthwise conv of x [T, C] by w [C, K]) per sequence; windows updated. */
export function causalConv1dSilu(x: Float32Array, w: Float32Array, out: Float32Array, C: number, K: number,
  batch: ForwardBatch, windows: Float32Array | null): void {
  const W = K - 1;
  for (let i = 0; i < batch.numSeqs; i++) {
    const { start, end } = seqRange(batch, i);
    const win = stateOf(windows, W * C, batch, i);
    const n = end - start;
    // input row r of the sequence's history: the window's W rows, then this chunk's
    const input = (r: number, c: number): number => r < W ? win[r * C + c]! : x[(start + r - W) * C + c]!;
    for (let t = 0; t < n; t++) {
      const o = (start + t) * C;
      for (let c = 0; c < C; c++) {
        let acc = 0;
        for (let j = 0; j < K; j++) acc += w[c * K + j]! * input(t + j, c);
        out[o + c] = silu(Math.fround(acc));
      }
    }
    // the new window: the last W rows of history + chunk (read before any is overwritten)
    const next = new Float32Array(W * C);
    for (let r = 0; r < W; r++) for (let c = 0; c < C; c++) next[r * C + c] = input(n + r, c);
    win.set(next);
  }
}

/** torch's softplus (beta 1, threshold 20): linear above the threshold. */
function softplus(v: number): number {
  return v > 20 ? v : Math.log1p(Math.exp(v));
}

/** x * rsqrt(sum x^2 + 1e-6) over [off, off + n), into dst (transformers' l2norm, as FLA computes it). */
function l2NormInto(src: Float32Array, off: number, n: number, dst: Float32Array, scale: number): void {
  let sumSq = 0;
  for (let i = 0; i < n; i++) sumSq += src[off + i]! * src[off + i]!;
  const inv = Math.fround(1 / Math.sqrt(Math.fround(sumSq) + 1e-6));
  for (let i = 0; i < n; i++) dst[i] = Math.fround(src[off + i]! * inv) * scale;
}

/**
 * Backend.gatedDeltaRule on f32 arrays; `states` is the layer's [numSlots, Hv, Dk, Dv] store, or null. `bf16States`
 * (--mamba-ssm-cache-dtype bfloat16): each sequence's state is rounded to bf16 after its step's tokens, as the GPU
 * stores it; the rule runs in f32 either way.
 */
export function gatedDeltaRule(conv: Float32Array, ba: Float32Array, aLog: Float32Array, dtBias: Float32Array,
  s: DeltaNetShape, batch: ForwardBatch, states: Float32Array | null, out: Float32Array, bf16States = false): void {
  const { numKeyHeads: Hk, numValueHeads: Hv, keyDim: Dk, valueDim: Dv } = s;
  const C = convChannels(s);
  const perKey = Hv / Hk;
  const qScale = Math.fround(1 / Math.sqrt(Dk));
  const q = new Float32Array(Dk);
  const k = new Float32Array(Dk);
  const delta = new Float64Array(Dv);
  for (let i = 0; i < batch.numSeqs; i++) {
    const { start, end } = seqRange(batch, i);
    const S = stateOf(states, Hv * Dk * Dv, batch, i);
    for (let t = start; t < end; t++) {
      for (let h = 0; h < Hv; h++) {
        const kh = Math.floor(h / perKey);
        // q and k of this v head's k head (recomputed per v head: cheap, and keeps the loop one head's business)
        l2NormInto(conv, t * C + kh * Dk, Dk, q, qScale);
        l2NormInto(conv, t * C + Hk * Dk + kh * Dk, Dk, k, 1);
        const v = t * C + 2 * Hk * Dk + h * Dv;
        const b = ba[t * 2 * Hv + h]!;
        const a = ba[t * 2 * Hv + Hv + h]!;
        const g = Math.fround(-Math.fround(Math.exp(aLog[h]!)) * Math.fround(softplus(Math.fround(a + dtBias[h]!))));
        const decay = Math.fround(Math.exp(g));
        const beta = Math.fround(1 / (1 + Math.exp(-b)));
        const base = h * Dk * Dv;
        for (let e = base; e < base + Dk * Dv; e++) S[e] = S[e]! * decay;
        // delta = beta (v - S^T k)
        for (let j = 0; j < Dv; j++) {
          let mem = 0;
          for (let d = 0; d < Dk; d++) mem += S[base + d * Dv + j]! * k[d]!;
          delta[j] = Math.fround(Math.fround(conv[v + j]! - Math.fround(mem)) * beta);
        }
        // S += k delta^T, then out = S^T q
        for (let d = 0; d < Dk; d++) {
          const kd = k[d]!;
          for (let j = 0; j < Dv; j++) S[base + d * Dv + j] = S[base + d * Dv + j]! + kd * delta[j]!;
        }
        const o = t * Hv * Dv + h * Dv;
        for (let j = 0; j < Dv; j++) {
          let acc = 0;
          for (let d = 0; d < Dk; d++) acc += S[base + d * Dv + j]! * q[d]!;
          out[o + j] = acc;
        }
      }
    }
    // kept as bf16 (nearest even, as the GPU's stores round)
    if (bf16States) for (let e = 0; e < S.length; e++) S[e] = bf16BitsToF32(f32ToBf16Bits(S[e]!));
  }
}

/** Per group of G = w.length: out = rmsnorm(x) * w * silu(z), rows of N (transformers' RMSNormGated, norm first). */
export function rmsNormGatedRows(x: Float32Array, z: Float32Array, w: Float32Array, out: Float32Array, T: number,
  N: number, eps: number): void {
  const G = w.length;
  for (let t = 0; t < T; t++) {
    for (let off = t * N; off < (t + 1) * N; off += G) {
      let sumSq = 0;
      for (let i = 0; i < G; i++) sumSq += x[off + i]! * x[off + i]!;
      const inv = 1 / Math.sqrt(sumSq / G + eps);
      for (let i = 0; i < G; i++) {
        out[off + i] = Math.fround(Math.fround(x[off + i]! * inv) * w[i]!) * Math.fround(silu(z[off + i]!));
      }
    }
  }
}
