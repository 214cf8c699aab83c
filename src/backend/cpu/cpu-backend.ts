// The reference backend: f32 ops in TypeScript, with matmul and attention's inner
// loops in WebAssembly SIMD assembled in TypeScript (wasm-*.ts), matmul columns
// split over worker threads. Batch-invariant: kernels.ts, attention.ts and
// wasm-matmul.ts say why no op's arithmetic depends on the rest of the batch.

import { availableParallelism } from 'node:os';
import type { DType, HostTensor } from '../../loader/types.js';
import { BYTES_PER_ELEMENT, bytesToF32 } from '../../loader/dtype.js';
import type { ForwardBatch, KvCacheSpec } from '../batch.js';
import type { Backend, DeltaNetGate, DeltaNetShape, Fp8BlockPart, MemoryReport, MoeExperts, MoeRoute,
  RecurrentStateLayout, RopeSpec, SsmCacheDtype, StepInputs, Tensor, TensorParallelRank } from '../backend.js';
import { causalConv1dSilu, convChannels, gatedDeltaRule, RecurrentStates, rmsNormGatedRows } from './deltanet.js';
import { moeExperts } from './moe.js';
import { pagedAttention, writeKv, type KvLayer } from './attention.js';
import {
  addSigmoidGatedRows, concatColumnRows, joinColumnParts, qkNormRopeRows, rmsNormRows, ropeAngles, sigmoidMulInto, siluMulRows,
} from './kernels.js';
import { CpuFp8Tensor, fp8BlockTensor } from './fp8.js';
import { attentionMetaLength, scratchBytesPerThread, writeAttentionMeta, type AttentionJob } from './attention-wasm.js';
import { SabHeap, WasmHeap, type Heap, type SharedView } from './heap.js';
import { MatmulPool } from './matmul-pool.js';
import type { KernelSetup } from './pool-protocol.js';
import { asCpu, bf16BytesInto, CpuTensor } from './tensor.js';
import { CpuHiddenCarry } from './carry.js';
import type { WasmMemory } from './wasm-asm.js';
import { instantiateWasmAttention, type WasmAttention } from './wasm-attention.js';
import { wasmMatmulModule } from './wasm-matmul.js';
import { Workspace } from './workspace.js';
import type { KvCacheDtype } from '../../loader/fp8.js';
import { TokenDrawer } from '../sampling/draw.js';
import { rowLogprobsReference, sampleRowsReference } from '../sampling/reference.js';

export { CpuTensor } from './tensor.js';

export interface CpuBackendOptions {
  /** Byte budget for the KV cache. */
  kvCacheBytes: number;
  /** Threads a matmul is split across (the calling thread included); default: all cores. */
  numThreads?: number;
  /**
   * 'wasm' (default where WebAssembly SIMD exists): SIMD matmul and attention;
   * weights (2-D bf16 ones kept bf16), KV cache and activations in one wasm memory
   * of at most 4 GiB. 'js': plain TypeScript, no size limit. Each is
   * batch-invariant; they differ from each other in summation order, so a
   * transcript belongs to one kernel.
   */
  kernel?: 'wasm' | 'js';
  /** 'fp8_e4m3': K and V rounded to FP8 E4M3 as they are written (the values the GPU's FP8 cache holds; kept f32). */
  kvCacheDtype?: KvCacheDtype;
  /** 'bf16': the delta-rule states rounded to bf16 after each step (the GPU's bf16 states' values; kept f32). */
  ssmCacheDtype?: SsmCacheDtype;
}

/** Below this many query-key-dim products attention runs on the calling thread alone. */
const MIN_PARALLEL_ATTENTION_MACS = 1 << 16;
/** Room the wasm heap keeps for step activations when it reports KV space. */
const WASM_ACTIVATION_RESERVE_BYTES = 512 * 2 ** 20;

function numElementsOf(shape: readonly number[]): number {
  return shape.reduce((a, b) => a * b, 1);
}

export class CpuBackend implements Backend {
  readonly name = 'cpu' as const;
  readonly computeDType: DType = 'f32';
  readonly kvCacheDtype: KvCacheDtype;
  /** The cache (and the states) are f32 whatever kvCacheDtype (ssmCacheDtype) rounds their values to. */
  readonly kvBytesPerElement = 4;
  readonly ssmBytesPerElement = 4;
  readonly ssmCacheDtype: SsmCacheDtype;
  private readonly kvCacheBytes: number;
  readonly kernel: 'wasm' | 'js';
  private drawer: TokenDrawer | null = null;
  /** The last sampleTokens result: what negative input ids refer to (async scheduling). */
  private lastSampled = new Int32Array(0);
  private readonly pool: MatmulPool;
  private readonly heap: Heap;
  private readonly workspace: Workspace;
  private weightBytes = 0;
  private kvLayers: KvLayer[] = [];
  private kvViews: SharedView[] = [];
  private readonly wasmAttention: WasmAttention | null = null;
  private readonly wasmMemory: WasmMemory | null = null;
  private kvSpec: KvCacheSpec | null = null;
  private recurrent: RecurrentStates | null = null;
  private ropeTables = new Map<Float32Array, { cos: Float32Array; sin: Float32Array }>();
  readonly carry = new CpuHiddenCarry((shape) => this.alloc(shape));

  constructor(opts: CpuBackendOptions) {
    this.kvCacheBytes = opts.kvCacheBytes;
    this.kvCacheDtype = opts.kvCacheDtype ?? 'auto';
    this.ssmCacheDtype = opts.ssmCacheDtype ?? 'f32';
    const numThreads = opts.numThreads ?? availableParallelism();
    const module = opts.kernel === 'js' ? null : wasmMatmulModule();
    if (opts.kernel === 'wasm' && !module) throw new Error('CPU backend: this runtime has no WebAssembly SIMD');
    let setup: KernelSetup;
    if (module) {
      const heap = new WasmHeap();
      setup = { kind: 'wasm', memory: heap.memory, module };
      this.heap = heap;
      this.wasmMemory = heap.memory;
      this.wasmAttention = instantiateWasmAttention(heap.memory);
      this.pool = new MatmulPool(numThreads, setup);
    } else {
      setup = { kind: 'js' };
      this.pool = new MatmulPool(numThreads, setup);
      this.heap = new SabHeap((id, b) => this.pool.register(id, b), (id) => this.pool.release(id));
    }
    this.kernel = setup.kind;
    this.workspace = new Workspace(this.heap);
  }

  get numThreads(): number {
    return this.pool.numThreads;
  }

  upload(t: HostTensor): Tensor {
    const numElements = numElementsOf(t.shape);
    if (t.data.byteLength !== numElements * BYTES_PER_ELEMENT[t.dtype]) {
      throw new Error(`upload ${t.name}: ${t.data.byteLength} bytes for ${t.dtype}[${t.shape.join(', ')}]`);
    }
    if (t.dtype === 'bf16' && this.kernel === 'wasm' && t.shape.length === 2) {
      const view = this.heap.alloc(Math.ceil(numElements / 2));
      new Uint8Array(view.data.buffer, view.data.byteOffset, t.data.byteLength).set(t.data);
      this.weightBytes += t.data.byteLength;
      return new CpuTensor([...t.shape], view, 'bf16');
    }
    const view = this.heap.alloc(numElements);
    if (t.dtype === 'bf16') bf16BytesInto(t.data, new Uint32Array(view.data.buffer, view.data.byteOffset, numElements));
    else view.data.set(bytesToF32(t.dtype, t.data));
    this.weightBytes += numElements * 4;
    return new CpuTensor([...t.shape], view);
  }

  /** Block FP8, as the reference computes it (./fp8.ts); kept in f32, so 4 bytes an element here. */
  uploadFp8Block(name: string, parts: readonly Fp8BlockPart[]): Tensor {
    const t = fp8BlockTensor(name, parts);
    this.weightBytes += t.values.byteLength + t.scaleInv.byteLength;
    return t;
  }

  allocateKvCache(spec: KvCacheSpec): void {
    const numLayerElements = spec.numBlocks * spec.blockSize * spec.numKvHeads * spec.headDim;
    const numBytes = 2 * spec.numLayers * numLayerElements * 4;
    if (numBytes + this.recurrentBytes > this.kvCacheBytes) {
      const states = this.recurrentBytes > 0 ? ` with ${this.recurrentBytes} bytes of recurrent states` : '';
      throw new Error(`KV cache of ${numBytes} bytes${states} exceeds the budget of ${this.kvCacheBytes}`);
    }
    for (let i = this.kvViews.length - 1; i >= 0; i--) this.heap.release(this.kvViews[i]!);
    this.kvViews = [];
    this.kvLayers = [];
    for (let l = 0; l < spec.numLayers; l++) {
      const [k, v] = [this.heap.alloc(numLayerElements), this.heap.alloc(numLayerElements)];
      k.data.fill(0);
      v.data.fill(0);
      this.kvViews.push(k, v);
      this.kvLayers.push({ k: k.data, v: v.data });
    }
    this.kvSpec = { ...spec };
  }

  /** The states count against the KV cache budget, as the pages do (the engine sizes both from it). */
  allocateRecurrentState(layout: RecurrentStateLayout): void {
    this.recurrent = null;
    const numBytes = RecurrentStates.bytesPerSlotOf(layout) * layout.numSlots;
    if (numBytes + this.kvBytes() > this.kvCacheBytes) {
      throw new Error(`recurrent states of ${numBytes} bytes and a KV cache of ${this.kvBytes()} exceed the budget of `
        + `${this.kvCacheBytes}`);
    }
    this.recurrent = new RecurrentStates(layout);
  }

  copyRecurrentState(src: number, dst: number): void {
    if (this.recurrent === null) throw new Error('copyRecurrentState: no recurrent state allocated');
    this.recurrent.copySlot(src, dst);
  }

  private get recurrentBytes(): number {
    return this.recurrent ? this.recurrent.bytesPerSlot * this.recurrent.layout.numSlots : 0;
  }

  private kvBytes(): number {
    const s = this.kvSpec;
    return s ? 2 * s.numLayers * s.numBlocks * s.blockSize * s.numKvHeads * s.headDim * 4 : 0;
  }

  memory(): MemoryReport {
    const kvBytes = this.kvBytes() + this.recurrentBytes;
    let availableKvBytes = this.kvCacheBytes - kvBytes;
    if (this.heap instanceof WasmHeap) {
      availableKvBytes = Math.max(0, Math.min(availableKvBytes, this.heap.numFreeBytes - WASM_ACTIVATION_RESERVE_BYTES));
    }
    return {
      availableKvBytes,
      totalBytes: this.heap.numBytes + this.kvCacheBytes - kvBytes,
      weightBytes: this.weightBytes,
    };
  }

  beginStep(batch: ForwardBatch): StepInputs {
    this.workspace.reset();
    this.ropeTables.clear();
    return { batch };
  }

  stepTensor(shape: readonly number[]): Tensor {
    return this.alloc([...shape]);
  }

  embedding(table: Tensor, step: StepInputs, firstRow?: number): Tensor {
    const tab = asCpu(table);
    const [vocabSize, hidden] = tab.shape as [number, number];
    const { numTokens, inputIds } = step.batch;
    const out = this.alloc([numTokens, hidden]);
    for (let t = 0; t < numTokens; t++) {
      const raw = inputIds[t]!;
      let id = raw >= 0 ? raw : this.lastSampled[-raw - 1] ?? -1;
      if (firstRow !== undefined && id >= 0) {
        id -= firstRow;
        if (id < 0 || id >= vocabSize) {
          out.data.fill(0, t * hidden, (t + 1) * hidden);
          continue;
        }
      }
      if (id < 0 || id >= vocabSize) {
        throw new Error(`embedding: token id ${raw < 0 ? `${id} (sampled row ${-raw - 1})` : id} outside [0, ${vocabSize})`);
      }
      tab.copyF32(id * hidden, (id + 1) * hidden, out.data, t * hidden);
    }
    return out;
  }

  rmsNorm(x: Tensor, w: Tensor, eps: number): Tensor {
    const xs = asCpu(x);
    const [T, H] = xs.shape as [number, number];
    const out = this.alloc([T, H]);
    rmsNormRows(xs.data, asCpu(w).data, out.data, T, H, eps);
    return out;
  }

  addRmsNorm(x: Tensor, residual: Tensor, w: Tensor, eps: number): Tensor {
    const xd = asCpu(x).data;
    const res = asCpu(residual);
    const rd = res.data;
    if (xd.length !== rd.length) throw new Error('addRmsNorm: x and residual differ in shape');
    for (let i = 0; i < rd.length; i++) rd[i] = rd[i]! + xd[i]!;
    return this.rmsNorm(res, w, eps);
  }

  matmul(x: Tensor, w: Tensor, _label?: string, bias?: Tensor | null): Tensor {
    const xs = asCpu(x);
    const [T, K] = xs.shape as [number, number];
    const [N, wK] = w.shape as [number, number];
    if (K !== wK) throw new Error(`matmul: x [${T}, ${K}] by w [${N}, ${wK}]^T`);
    const out = this.alloc([T, N]);
    if (w instanceof CpuFp8Tensor) {
      if (bias) throw new Error('matmul: a bias on a block-FP8 weight (the loader refuses FP8 projections with biases)');
      w.matmulInto(xs.data, T, out.data);
      return out;
    }
    const ws = asCpu(w);
    this.pool.matmul(xs.view, ws.view, out.view, T, K, N, ws.dtype === 'bf16');
    if (bias) {
      const b = asCpu(bias).data;
      if (b.length !== N) throw new Error(`matmul: bias [${b.length}] for ${N} outputs`);
      const y = out.data;
      for (let t = 0; t < T; t++) for (let n = 0; n < N; n++) y[t * N + n]! += b[n]!;
    }
    return out;
  }

  qkNormRope(qkv: Tensor, qNorm: Tensor | null, kNorm: Tensor | null, eps: number,
    numHeads: number, numKvHeads: number, rope: RopeSpec, step: StepInputs, _kvLayer?: number): void {
    const q = asCpu(qkv);
    const [T, width] = q.shape as [number, number];
    const D = rope.headDim;
    if (width !== (numHeads + 2 * numKvHeads) * D) throw new Error(`qkNormRope: row width ${width}`);
    // partial rotary: the first 2 * half channels of each head rotate, the rest pass through
    const half = rope.invFreq.length;
    if (2 * half > D) throw new Error(`qkNormRope: ${2 * half} rotary channels in a head of ${D}`);
    qkNormRopeRows(q.data, T, width, numHeads, numKvHeads, D, half, this.ropeTable(rope, step.batch),
      qNorm ? asCpu(qNorm).data : null, kNorm ? asCpu(kNorm).data : null, eps);
  }

  attention(qkv: Tensor, layer: number, numHeads: number, numKvHeads: number, scale: number,
    step: StepInputs): Tensor {
    const spec = this.kvSpec;
    const kv = this.kvLayers[layer];
    if (!spec || !kv) throw new Error(`attention: no KV cache for layer ${layer}`);
    const q = asCpu(qkv);
    const T = q.shape[0]!;
    const headDim = q.shape[1]! / (numHeads + 2 * numKvHeads);
    if (headDim !== spec.headDim || numKvHeads !== spec.numKvHeads) {
      throw new Error(`attention: qkv heads do not match the KV cache spec`);
    }
    const shape = { numHeads, numKvHeads, headDim, blockSize: spec.blockSize };
    writeKv(q.data, kv, step.batch, shape, this.kvCacheDtype === 'fp8_e4m3');
    const out = this.alloc([T, numHeads * headDim]);
    if (this.wasmAttention && this.wasmMemory && headDim % 4 === 0) {
      const batch = step.batch;
      let maxSeqLen = 0;
      for (let i = 0; i < batch.numSeqs; i++) maxSeqLen = Math.max(maxSeqLen, batch.seqLens[i]!);
      const meta = this.workspace.alloc(attentionMetaLength(batch));
      writeAttentionMeta(batch, new Int32Array(meta.data.buffer, meta.data.byteOffset, meta.data.length));
      const scratch = this.workspace.alloc(this.pool.numThreads * scratchBytesPerThread(maxSeqLen) / 4);
      const kvViews = this.kvViews;
      const job: AttentionJob = {
        qkv: q.view.offset * 4, k: kvViews[2 * layer]!.offset * 4, v: kvViews[2 * layer + 1]!.offset * 4,
        out: out.view.offset * 4, meta: meta.offset * 4, numSeqs: batch.numSeqs,
        maxBlocksPerSeq: batch.maxBlocksPerSeq, numHeads, numKvHeads, headDim, blockSize: spec.blockSize,
        scale, maxSeqLen, scratch: scratch.offset * 4,
      };
      const numMacs = T * maxSeqLen * numHeads * headDim;
      this.pool.attention(this.wasmAttention, this.wasmMemory, job, batch.numSeqs * numHeads,
        numMacs >= MIN_PARALLEL_ATTENTION_MACS);
    } else {
      pagedAttention(q.data, kv, step.batch, shape, scale, out.data);
    }
    return out;
  }

  sigmoidMul(x: Tensor, gate: Tensor): Tensor {
    const [xs, gs] = [asCpu(x), asCpu(gate)];
    if (xs.numElements !== gs.numElements) throw new Error('sigmoidMul: x and gate differ in shape');
    const out = this.alloc([...xs.shape]);
    sigmoidMulInto(xs.data, gs.data, out.data);
    return out;
  }

  causalConv1d(x: Tensor, w: Tensor, layer: number, step: StepInputs): Tensor {
    const xs = asCpu(x);
    const [T, C] = xs.shape as [number, number];
    const [wC, K] = w.shape as [number, number];
    if (wC !== C) throw new Error(`causalConv1d: x [${T}, ${C}] by w [${wC}, ${K}]`);
    const out = this.alloc([T, C]);
    const ws = asCpu(w);
    // a 2-D bf16 weight stays bf16 under the wasm kernel: widen its few elements (C x K)
    const wd = ws.dtype === 'f32' ? ws.data : new Float32Array(ws.numElements);
    if (ws.dtype !== 'f32') ws.copyF32(0, ws.numElements, wd, 0);
    causalConv1dSilu(xs.data, wd, out.data, C, K, step.batch, this.recurrentLayer(layer, step).conv[layer] ?? null);
    return out;
  }

  gatedDeltaRule(conv: Tensor, ba: Tensor, aLog: Tensor, dtBias: Tensor, shape: DeltaNetShape, layer: number,
    step: StepInputs, gate?: DeltaNetGate): Tensor {
    const cs = asCpu(conv);
    const T = cs.shape[0]!;
    if (cs.shape[1] !== convChannels(shape) || ba.shape[1] !== 2 * shape.numValueHeads) {
      throw new Error(`gatedDeltaRule: conv [${cs.shape.join(', ')}] and ba [${ba.shape.join(', ')}] do not fit ${JSON.stringify(shape)}`);
    }
    const out = this.alloc([T, shape.numValueHeads * shape.valueDim]);
    gatedDeltaRule(cs.data, asCpu(ba).data, asCpu(aLog).data, asCpu(dtBias).data, shape, step.batch,
      this.recurrentLayer(layer, step).ssm[layer] ?? null, out.data, this.ssmCacheDtype === 'bf16');
    return gate ? this.rmsNormGated(out, gate.z, gate.w, gate.eps) : out;
  }

  concatColumns(parts: readonly Tensor[]): Tensor {
    const xs = parts.map(asCpu);
    const [T, W] = (xs[0]?.shape ?? []) as [number, number];
    if (xs.length === 0 || xs.some((x) => x.shape.length !== 2 || x.shape[0] !== T || x.shape[1] !== W)) {
      throw new Error(`concatColumns: parts ${xs.map((x) => `[${x.shape.join(', ')}]`).join(', ')} are not [T, W] alike`);
    }
    const out = this.alloc([T, xs.length * W]);
    concatColumnRows(xs.map((x) => x.data), out.data, T, W);
    return out;
  }

  columns(x: Tensor, start: number, width: number): Tensor {
    const xs = asCpu(x);
    const [T, N] = xs.shape as [number, number];
    if (!(start >= 0 && width > 0 && start + width <= N)) throw new Error(`columns: [${start}, ${start + width}) of [${T}, ${N}]`);
    const out = this.alloc([T, width]);
    for (let t = 0; t < T; t++) out.data.set(xs.data.subarray(t * N + start, t * N + start + width), t * width);
    return out;
  }

  rmsNormGated(x: Tensor, z: Tensor, w: Tensor, eps: number): Tensor {
    const xs = asCpu(x);
    const [T, N] = xs.shape as [number, number];
    const wd = asCpu(w).data;
    if (asCpu(z).numElements !== T * N || N % wd.length !== 0) throw new Error('rmsNormGated: x, z and w do not fit');
    const out = this.alloc([T, N]);
    rmsNormGatedRows(xs.data, asCpu(z).data, wd, out.data, T, N, eps);
    return out;
  }

  siluMul(gateUp: Tensor): Tensor {
    const g = asCpu(gateUp);
    const [T, twoI] = g.shape as [number, number];
    const out = this.alloc([T, twoI / 2]);
    siluMulRows(g.data, out.data, T, twoI / 2);
    return out;
  }

  matmulSiluMul(x: Tensor, gateUp: Tensor): Tensor {
    return this.siluMul(this.matmul(x, gateUp));
  }

  moeExperts(x: Tensor, router: Tensor, experts: MoeExperts, route: MoeRoute): Tensor {
    return moeExperts({ alloc: (shape) => this.alloc(shape), matmul: (a, w) => this.matmul(a, w),
      siluMul: (g) => this.siluMul(g) }, x, this.matmul(x, router, 'router'), experts, route);
  }

  addSigmoidGated(acc: Tensor, gate: Tensor, y: Tensor): void {
    const [cs, gs, ys] = [asCpu(acc), asCpu(gate), asCpu(y)];
    const [T, N] = cs.shape as [number, number];
    if (gs.numElements !== T || ys.numElements !== T * N) {
      throw new Error(`addSigmoidGated: acc [${cs.shape.join(', ')}], gate [${gs.shape.join(', ')}], y [${ys.shape.join(', ')}]`);
    }
    addSigmoidGatedRows(cs.data, gs.data, ys.data, T, N);
  }

  gatherColumnParts(x: Tensor, tp: TensorParallelRank, width: number): Tensor {
    const [R, W] = [x.shape[0]!, x.shape[1]!];
    const parts = this.alloc([tp.size * R, W]);
    tp.allGather(x, parts);
    const out = this.alloc([R, width]);
    joinColumnParts(parts.data, out.data, R, W, width);
    return out;
  }

  gatherLogitRows(x: Tensor, step: StepInputs): Tensor {
    const xs = asCpu(x);
    const H = xs.shape[1]!;
    const rows = step.batch.logitsIndices;
    const out = this.alloc([rows.length, H]);
    for (let i = 0; i < rows.length; i++) {
      const r = rows[i]!;
      out.data.set(xs.data.subarray(r * H, (r + 1) * H), i * H);
    }
    return out;
  }

  beginLayer(): void {}

  endLayers(): void {}

  sampleTokens(logits: Tensor, step: StepInputs): Int32Array {
    const l = asCpu(logits);
    const [numRows, vocab] = [l.shape[0]!, l.shape[1]!];
    if (this.drawer?.vocabSize !== vocab) this.drawer = new TokenDrawer(vocab);
    const ids = sampleRowsReference(this.toHost(l), vocab, numRows, step.batch.sampling, this.drawer);
    this.lastSampled = ids.slice();
    return ids;
  }

  toHost(t: Tensor): Float32Array {
    const c = asCpu(t);
    const out = new Float32Array(c.numElements);
    c.copyF32(0, c.numElements, out, 0);
    return out;
  }

  toHostRows(t: Tensor, first: number, count: number): Float32Array {
    const c = asCpu(t);
    const n = c.shape[1]!;
    const out = new Float32Array(count * n);
    c.copyF32(first * n, (first + count) * n, out, 0);
    return out;
  }

  rowLogprobs(logits: Tensor, first: number, targets: Int32Array, numTop: number): Int32Array {
    const vocab = asCpu(logits).shape[1]!;
    return rowLogprobsReference(this.toHostRows(logits, first, targets.length), vocab, targets, numTop);
  }

  dispose(): void {
    this.pool.dispose();
    this.kvLayers = [];
    this.kvViews = [];
    this.kvSpec = null;
    this.recurrent = null;
  }

  /** The recurrent states of `layer`; a step of slotless sequences (all padding or fresh) may run without any. */
  private recurrentLayer(layer: number, step: StepInputs): { conv: (Float32Array | undefined)[]; ssm: (Float32Array | undefined)[] } {
    const r = this.recurrent;
    if (r && layer < r.layout.numLayers) return r;
    if (step.batch.stateSlots?.some((s) => s >= 0)) throw new Error(`recurrent state: none allocated for layer ${layer}`);
    return { conv: [], ssm: [] };
  }

  private alloc(shape: number[]): CpuTensor {
    return new CpuTensor(shape, this.workspace.alloc(numElementsOf(shape)));
  }

  private ropeTable(rope: RopeSpec, batch: ForwardBatch): { cos: Float32Array; sin: Float32Array } {
    let table = this.ropeTables.get(rope.invFreq);
    if (!table) {
      const half = rope.invFreq.length;
      table = { cos: new Float32Array(batch.numTokens * half), sin: new Float32Array(batch.numTokens * half) };
      for (let t = 0; t < batch.numTokens; t++) {
        ropeAngles(batch.positions[t]!, rope.invFreq, table.cos.subarray(t * half, (t + 1) * half),
          table.sin.subarray(t * half, (t + 1) * half));
      }
      this.ropeTables.set(rope.invFreq, table);
    }
    return table;
  }
}
