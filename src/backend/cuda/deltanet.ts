// Gated DeltaNet on the device (Backend.causalConv1d, gatedDeltaRule, rmsNormGated): kernels/deltanet.cu's kernels
// on the recurrent state slots kv-memory.ts keeps, read and written in place through the step's stateSlots
// section, so a decode step's graph replays whatever slots its sequences hold. Profile buckets: "deltanet conv",
// "deltanet rule" (with the gated norm where one launch computes both), "deltanet norm".

import { convChannels, type DeltaNetGate, type DeltaNetShape, type StepInputs, type Tensor } from '../backend.js';
import type { ForwardBatch } from '../batch.js';
import { readKnob } from '../../knobs/knobs.js';
import { f32, i32, ptr } from './device.js';
import { CONV_MAX_TAPS, DELTANET_CHUNK_THREADS, DELTANET_CHUNKS, DELTANET_KEY_DIMS, deltanetChunkedSharedBytes }
  from './kernel-defines.js';
import type { KvMemory, RecurrentMemory } from './kv-memory.js';
import { metaPtr } from './step-buffers.js';
import type { StepContext } from './step-context.js';
import { asCuda, asStrided, ColumnView, type CudaTensor } from './tensor.js';

/** Tokens a thread of conv1d_silu_tokens serves (kernels/deltanet.cu's CONV_TOKENS). */
const CONV_TOKENS = 8;

/** The fused rule + gated norm's most threads a block (its __launch_bounds__) and widest v head (its shared row). */
const FUSED_NORM_THREADS = 512;
const FUSED_NORM_MAX_DV = 256;

/** A decode step's conv left to the rule (QUIRE_DELTANET_FUSED_DECODE): what its launch would have taken. */
interface PendingConv {
  out: CudaTensor;
  layer: number;
  launch: () => void;
  x: { ptr: bigint; ld: number };
  w: Tensor;
  K: number;
  windowAt: number;
}

/** A token count past any step's (the kernels' "never": INT32_MAX). */
const NEVER = 0x7fffffff;

/**
 * The chunked rule's bound for a backend: none in batch-invariant mode, which promises a prompt's bits however it is
 * split (a prefix-cache hit, another token budget), and the chunked rule's depend on where its chunks start;
 * otherwise the one asked for, or QUIRE_DELTANET_CHUNKED_FROM.
 */
export function chunkedFromFor(batchInvariant: boolean, asked?: number): number {
  return batchInvariant ? 0 : asked ?? readKnob('QUIRE_DELTANET_CHUNKED_FROM');
}

/**
 * Which builds of the rule a step launches, and the bounds each launch filters its sequences by: the chunked one
 * where some sequence has chunkedFrom tokens or more (0: never), the wide one where some has 1 to wideMax (below
 * chunkedFrom), deltanet_recurrent where some lies between (queryStartLoc: cumulative, numSeqs + 1).
 */
export function ruleBuilds(queryStartLoc: Int32Array, numSeqs: number, wideMaxTokens: number, chunkedFromTokens = 0):
  { wide: boolean; recurrent: boolean; chunked: boolean; wideMax: number; chunkedFrom: number } {
  const chunkedFrom = chunkedFromTokens > 0 ? chunkedFromTokens : NEVER;
  const wideMax = Math.min(wideMaxTokens, chunkedFrom - 1);
  let [wide, recurrent, chunked] = [false, false, false];
  for (let s = 0; s < numSeqs; s++) {
    const q = queryStartLoc[s + 1]! - queryStartLoc[s]!;
    if (q >= chunkedFrom) chunked = true;
    else if (q > wideMax) recurrent = true;
    else if (q > 0) wide = true;
  }
  return { wide, recurrent, chunked, wideMax, chunkedFrom };
}

export class CudaDeltaNet {
  /** A decode step's rule and gated norm in one launch (deltanet_recurrent_norm; QUIRE_DELTANET_FUSED_NORM). */
  private readonly fusedNorm: boolean;
  /** A decode step's conv, rule and gated norm in one launch (deltanet_decode; QUIRE_DELTANET_FUSED_DECODE). */
  private readonly fusedDecode: boolean;
  /**
   * Most tokens a sequence whose rule runs on deltanet_recurrent_wide (the same bits, coalesced state loads;
   * QUIRE_DELTANET_WIDE_MAX_TOKENS; 0: none).
   */
  private readonly wideMaxTokens: number;
  /** Fewest tokens of a sequence whose rule runs on deltanet_chunked (QUIRE_DELTANET_CHUNKED_FROM; 0: none). */
  private readonly chunkedFrom: number;
  /** Tokens a chunk of deltanet_chunked (QUIRE_DELTANET_CHUNK). */
  private readonly chunk: number;
  /** deltanet_chunked's products on tensor cores (its _mma build; QUIRE_DELTANET_CHUNKED_MMA). */
  private readonly chunkedMma: boolean;
  /** A mixed step's wide and recurrent sequences in one launch (QUIRE_DELTANET_ONE_LAUNCH). */
  private readonly oneLaunch: boolean;
  /**
   * The decode conv causalConv1d left to gatedDeltaRule (fusedDecode), as the fused rope is left to attention: its
   * output is written only by the launch that takes it (the rule's), or by its own launch before any other op.
   */
  private pendingConv: PendingConv | null = null;
  /** The last step's rule builds (buildsOf). */
  private builds: { batch: ForwardBatch; b: ReturnType<typeof ruleBuilds> } | null = null;

  constructor(private readonly s: StepContext, private readonly kv: KvMemory,
    o: { fusedNorm?: boolean; fusedDecode?: boolean; wideMaxTokens?: number; chunkedFrom?: number;
      chunk?: number; oneLaunch?: boolean; chunkedMma?: boolean } = {}) {
    this.fusedNorm = o.fusedNorm ?? readKnob('QUIRE_DELTANET_FUSED_NORM');
    this.fusedDecode = o.fusedDecode ?? readKnob('QUIRE_DELTANET_FUSED_DECODE');
    this.wideMaxTokens = o.wideMaxTokens ?? readKnob('QUIRE_DELTANET_WIDE_MAX_TOKENS');
    this.chunkedFrom = o.chunkedFrom ?? chunkedFromFor(false);
    this.chunk = o.chunk ?? Number(readKnob('QUIRE_DELTANET_CHUNK'));
    this.chunkedMma = o.chunkedMma ?? readKnob('QUIRE_DELTANET_CHUNKED_MMA');
    this.oneLaunch = o.oneLaunch ?? readKnob('QUIRE_DELTANET_ONE_LAUNCH');
    if (!DELTANET_CHUNKS.includes(this.chunk)) {
      throw new Error(`CudaDeltaNet: chunks of ${this.chunk} tokens (${DELTANET_CHUNKS.join(', ')} are built)`);
    }
  }

  /** ruleBuilds of the step's batch, worked out at its first layer (every layer of a step has the same sequences). */
  private buildsOf(batch: ForwardBatch): ReturnType<typeof ruleBuilds> {
    if (this.builds?.batch !== batch) {
      this.builds = { batch, b: ruleBuilds(batch.queryStartLoc, batch.numSeqs, this.wideMaxTokens, this.chunkedFrom) };
    }
    return this.builds.b;
  }

  /** Launches a conv left pending (the rule that would have taken it did not: another shape, or no gate). */
  private flushConv(): void {
    const p = this.pendingConv;
    this.pendingConv = null;
    p?.launch();
  }

  /** The state of recurrent layer `layer`, checked against the slots' layout. */
  private layerState(layer: number, shape: DeltaNetShape | null, op: string): RecurrentMemory {
    const r = this.kv.recurrent();
    if (!(Number.isInteger(layer) && layer >= 0 && layer < r.layout.numLayers)) {
      throw new Error(`${op}: recurrent layer ${layer} outside the ${r.layout.numLayers} allocated`);
    }
    const held = r.layout.shape;
    if (shape !== null && (shape.numKeyHeads !== held.numKeyHeads || shape.numValueHeads !== held.numValueHeads
      || shape.keyDim !== held.keyDim || shape.valueDim !== held.valueDim || shape.convKernel !== held.convKernel)) {
      throw new Error(`${op}: shape ${JSON.stringify(shape)}, the states hold ${JSON.stringify(r.layout.shape)}`);
    }
    return r;
  }

  /** Backend.columns: a view whose rows keep x's stride (ColumnView). */
  columns(x: Tensor, start: number, width: number): CudaTensor {
    const { ptr: base, ld } = asStrided(x);
    const [T, N] = [x.shape[0]!, x.shape[1]!];
    if ((x as CudaTensor).dtype !== 'bf16') throw new Error(`columns: a ${(x as CudaTensor).dtype} tensor (bf16 only)`);
    if (!(Number.isInteger(start) && start >= 0 && width > 0 && start + width <= N)) {
      throw new Error(`columns: [${start}, ${start + width}) of [${T}, ${N}]`);
    }
    return new ColumnView([T, width], base + BigInt(start * 2), ld);
  }

  causalConv1d(x: Tensor, w: Tensor, layer: number, step: StepInputs): CudaTensor {
    const xs = { shape: x.shape, ...asStrided(x) };
    const [T, C] = [xs.shape[0]!, xs.shape[1]!];
    const [wC, K] = [w.shape[0]!, w.shape[1]!];
    const r = this.layerState(layer, null, 'causalConv1d');
    if (wC !== C || C !== convChannels(r.layout.shape) || K !== r.layout.shape.convKernel) {
      throw new Error(`causalConv1d: x [${T}, ${C}] by w [${wC}, ${K}] for states of ${JSON.stringify(r.layout.shape)}`);
    }
    if (K < 2 || K > CONV_MAX_TAPS) throw new Error(`causalConv1d: ${K} taps (2 to ${CONV_MAX_TAPS} on CUDA)`);
    const { batch, meta, layout } = this.s.of(step);
    const out = this.s.act([T, C]);
    const sections = [ptr(metaPtr(meta, layout.queryStartLoc)), ptr(metaPtr(meta, layout.seqLens)),
      ptr(metaPtr(meta, layout.stateSlots))];
    const tail = [i32(C), i32(xs.ld), i32(K), i32(r.slotFloats), i32(layer * r.convFloats)];
    const perSeq = [batch.numSeqs, Math.ceil(C / 128), 1] as const;
    this.flushConv();
    const decode = () => this.s.timed('deltanet conv', () => this.s.device.launch('deltanet.cu', 'conv1d_silu_bf16',
      [...perSeq], 128, [ptr(xs.ptr), ptr(asCuda(w).ptr), ptr(out.ptr), ptr(r.base), ...sections, ...tail], 0, true));
    if (T === batch.numSeqs && this.fusedDecode) {
      this.pendingConv = { out, layer, launch: decode, x: xs, w, K, windowAt: layer * r.convFloats };
      return out;
    }
    this.s.timed('deltanet conv', () => {
      const d = this.s.device;
      // decode rows walk their one token per (sequence, channel); a step with prompt chunks takes a thread per
      // (token, channel) and updates the windows after (kernels/deltanet.cu: the same bits either way)
      if (T === batch.numSeqs) {
        decode();
        return;
      }
      d.launch('deltanet.cu', 'conv1d_silu_tokens_bf16', [Math.ceil(T / CONV_TOKENS), Math.ceil(C / 128), 1], 128,
        [ptr(xs.ptr), ptr(asCuda(w).ptr), ptr(out.ptr), ptr(r.base), ...sections, i32(batch.numSeqs), i32(T), ...tail],
        0, true);
      d.launch('deltanet.cu', 'conv1d_window_bf16', [...perSeq], 128, [ptr(xs.ptr), ptr(r.base), ...sections, ...tail],
        0, true);
    });
    return out;
  }

  gatedDeltaRule(conv: Tensor, ba: Tensor, aLog: Tensor, dtBias: Tensor, shape: DeltaNetShape, layer: number,
    step: StepInputs, gate?: DeltaNetGate): CudaTensor {
    const cs = asCuda(conv);
    const bas = asStrided(ba);
    const T = cs.shape[0]!;
    const { numKeyHeads: Hk, numValueHeads: Hv, keyDim: Dk, valueDim: Dv } = shape;
    if (cs.shape[1] !== convChannels(shape) || ba.shape[1] !== 2 * Hv || ba.shape[0] !== T) {
      throw new Error(`gatedDeltaRule: conv [${cs.shape.join(', ')}] and ba [${ba.shape.join(', ')}] do not fit ${JSON.stringify(shape)}`);
    }
    if (!DELTANET_KEY_DIMS.includes(Dk)) throw new Error(`gatedDeltaRule: key head dim ${Dk} (${DELTANET_KEY_DIMS.join(', ')} on CUDA)`);
    if (Hv % Hk !== 0) throw new Error(`gatedDeltaRule: ${Hv} value heads over ${Hk} key heads`);
    const r = this.layerState(layer, shape, 'gatedDeltaRule');
    const { batch, meta, layout } = this.s.of(step);
    const out = this.s.act([T, Hv * Dv]);
    // the layer's state, in elements of its type from the slot's start (after every layer's f32 window)
    const perFloat = 4 / r.ssmBytesPerElement;
    const ssmAt = perFloat * r.layout.numLayers * r.convFloats + layer * r.ssmElements;
    const ss = r.ssmBytesPerElement === 2 ? '_sbf16' : '';  // the kernels' bf16-state builds
    const sections = [ptr(r.base), ptr(metaPtr(meta, layout.queryStartLoc)), ptr(metaPtr(meta, layout.seqLens)),
      ptr(metaPtr(meta, layout.stateSlots)), i32(Hk), i32(Hv), i32(Dv), i32(r.slotFloats), i32(ssmAt)];
    const head = [ptr(cs.ptr), ptr(bas.ptr), i32(bas.ld), ptr(asCuda(aLog).ptr), ptr(asCuda(dtBias).ptr)];
    const groups = Math.ceil(Dv / (32 / (Dk / 32)));  // warps of COLS columns
    const fusable = T === batch.numSeqs && gate?.w.shape[0] === Dv && Dv <= FUSED_NORM_MAX_DV;
    const pending = this.pendingConv?.out.ptr === cs.ptr && this.pendingConv.layer === layer ? this.pendingConv : null;
    const warps = Math.max(groups, Math.ceil((2 * Dk + Dv) / 32));  // deltanet_decode: a thread a conv channel too
    if (gate && pending && fusable && warps * 32 <= FUSED_NORM_THREADS) {
      this.pendingConv = null;
      const zs = asStrided(gate.z);
      this.checkGate(gate, T, Hv * Dv);
      this.s.timed('deltanet rule', () => this.s.device.launch('deltanet.cu', `deltanet_decode_bf16_${Dk}${ss}`,
        [batch.numSeqs, Hv, 1], 32 * warps, [ptr(pending.x.ptr), i32(pending.x.ld), ptr(asCuda(pending.w).ptr),
          i32(pending.K), i32(pending.windowAt), ptr(r.arrivals), ...head.slice(1), ptr(zs.ptr), i32(zs.ld),
          ptr(asCuda(gate.w).ptr), ptr(out.ptr), f32(gate.eps), ...sections], warps * 2 * Dk * 4, true));
      return out;
    }
    this.flushConv();
    if (gate && fusable && (this.fusedNorm || this.fusedDecode) && groups * 32 <= FUSED_NORM_THREADS) {
      const zs = asStrided(gate.z);
      this.checkGate(gate, T, Hv * Dv);
      this.s.timed('deltanet rule', () => this.s.device.launch('deltanet.cu', `deltanet_recurrent_norm_bf16_${Dk}${ss}`,
        [batch.numSeqs, Hv, 1], 32 * groups, [...head, ptr(zs.ptr), i32(zs.ld), ptr(asCuda(gate.w).ptr), ptr(out.ptr),
          f32(gate.eps), ...sections], groups * 2 * Dk * 4, true));
      return out;
    }
    // sequences of up to wideMax tokens on the wide build (a block per 32 columns of a v head, Dk threads), those of
    // chunkedFrom and more on the chunked one, the others on deltanet_recurrent (a warp per COLS columns), each
    // launch skipping the others' sequences; with oneLaunch, a step with both of the first two kinds launches
    // deltanet_recurrent_mixed for them instead
    const b = this.buildsOf(batch);
    const mixed = b.wide && b.recurrent && this.oneLaunch;
    const perColumns: [number, number, number] = [batch.numSeqs, Hv, Math.ceil(Dv / 32)];
    const wideArgs = [...head, ptr(out.ptr), ...sections, i32(b.wideMax)];
    this.s.timed('deltanet rule', () => {
      const d = this.s.device;
      if (mixed) {
        d.launch('deltanet.cu', `deltanet_recurrent_mixed_bf16_${Dk}${ss}`, perColumns, Dk,
          [...wideArgs, i32(b.chunkedFrom)], 0, true);
      } else if (b.wide) {
        d.launch('deltanet.cu', `deltanet_recurrent_wide_bf16_${Dk}${ss}`, perColumns, Dk, wideArgs, 0, true);
      }
      if (b.chunked) {
        const mma = this.chunkedMma ? '_mma' : '';
        d.launch('deltanet_chunked.cu', `deltanet_chunked${this.chunk}${mma}_bf16_${Dk}${ss}`, perColumns,
          DELTANET_CHUNK_THREADS, [...head, ptr(out.ptr), ...sections, i32(b.chunkedFrom)],
          deltanetChunkedSharedBytes(Dk, this.chunk, this.chunkedMma), true);
      }
      if (b.recurrent && !mixed) {
        d.launch('deltanet.cu', `deltanet_recurrent_bf16_${Dk}${ss}`, [batch.numSeqs, Hv, groups], 32,
          [...wideArgs, i32(b.chunkedFrom)], 0, true);
      }
    });
    return gate ? this.rmsNormGated(out, gate.z, gate.w, gate.eps) : out;
  }

  private checkGate(gate: DeltaNetGate, T: number, N: number): void {
    if (gate.z.shape[0] !== T || gate.z.shape[1] !== N) throw new Error('gatedDeltaRule: its gate\'s z does not fit');
  }

  rmsNormGated(x: Tensor, z: Tensor, w: Tensor, eps: number): CudaTensor {
    const xs = asCuda(x);
    const [T, N] = [xs.shape[0]!, xs.shape[1]!];
    const G = w.shape[0]!;
    if (z.shape[0] !== T || z.shape[1] !== N || N % G !== 0) throw new Error('rmsNormGated: x, z and w do not fit');
    const zs = asStrided(z);
    const out = this.s.act([T, N]);
    this.flushConv();
    this.s.timed('deltanet norm', () => this.s.device.launch('deltanet.cu', 'rms_norm_gated_bf16',
      [T, Math.ceil(N / G / 4), 1], 128, [ptr(xs.ptr), ptr(zs.ptr), i32(zs.ld), ptr(asCuda(w).ptr), ptr(out.ptr), i32(N),
        i32(G), f32(eps)], 0, true));
    return out;
  }
}
