// The CUDA backend: bf16 activations and weights, fp32 accumulation; GEMMs on
// cuBLASLt (or, in the batch-invariant mode, kernels/gemm_rows.cu), every
// other op one of our kernels (kernels/*.cu); decode steps
// captured as CUDA graphs per batch-size bucket (see graph()).

import { BYTES_PER_ELEMENT, bytesToF32, f32ToBf16 } from '../../loader/dtype.js';
import type { DType, HostTensor, WeightSource } from '../../loader/types.js';
import type { ForwardBatch, KvCacheSpec } from '../batch.js';
import type { Backend, Fp8BlockPart, MemoryReport, RopeSpec, StepInputs, Tensor } from '../backend.js';
import { decodeAsDependent, launchDecodeAttention, launchPrefillAttention, type DecodeRope } from './attention-launch.js';
import {
  decodeGridZ, decodeGroup, LONG_SPLIT_TOKENS, MAX_SPLITS, maxSplitsOf, SHORT_GRAPH_SPLITS, SHORT_SPLIT_TOKENS,
  graphKey, GRAPH_KV_CLASSES, SHORT_GRAPH_KV, shortGraphRows, SPLIT_TOKENS,
} from './decode-splits.js';
import { Device, f32, i32, ptr, type KernelArg } from './device.js';
import { Gemm } from './ffi/cublaslt.js';
import { planGemmRows } from './gemm-rows.js';
import { CHAIN_NORM_FROM_HIDDEN, chainNormPartsBytes, chainNormRole, type ChainGemmLaunch, type ChainSilu,
  planChainGemm } from './gemm-chain.js';
import { check, CU_EVENT_DISABLE_TIMING, CU_EVENT_RECORD_EXTERNAL, outPtr, type Handle } from './ffi/driver.js';
import { GraphCache, type HostRead } from './graph-cache.js';
import { bf16BytesToF32, HostStaging } from './host-staging.js';
import { Profiler, type ProfileLogMode } from './profiler.js';
import { kvCacheBudget } from './memory-budget.js';
import type { KvCacheDtype } from '../../loader/fp8.js';
import { MAX_DECODE_ROWS_PER_TOKEN, type Meta, metaPtr, StepBuffers } from './step-buffers.js';
import { layoutAtLeast, layoutFor, type MetaLayout, packStep, type PackedStep, stepLayout } from './step-meta.js';
import { StepWorkspace } from './workspace.js';
import { WeightUploader } from './weight-upload.js';
import { fp8DeviceScales, fp8ScaleRowFloats } from './fp8-layout.js';
import { FP8_BLOCK } from '../fp8-linear.js';
import { COPY_BANDWIDTH_BYTES, copyBandwidth as measureCopyBandwidth, firstThatFits, gemmFlops } from './bandwidth.js';
import { readKnob } from '../../knobs/knobs.js';

export interface CudaBackendOptions {
  deviceOrdinal?: number;
  /** Fraction of the device's memory this engine may hold (weights + workspace + KV), as vLLM's flag. */
  gpuMemoryUtilization?: number;
  /** Kept free for activations when reporting availableKvBytes (minus what the workspace already holds). */
  activationReserveBytes?: number;
  /** Disables CUDA graphs: graph() just runs its function. */
  enforceEager?: boolean;
  /**
   * Every GEMM on kernels/gemm_rows.cu, whose sums follow K alone, instead of cuBLASLt, and prompt rows'
   * attention on the decode kernel: a row's output bits no longer depend on how many rows share its step or
   * how its prompt was chunked (slower beyond ~16 rows and for long prompts; docs/perf-log.md).
   */
  batchInvariant?: boolean;
  /**
   * GEMMs of up to 8 tokens on kernels/gemm_chain.cu (cuBLASLt's sums, streamed faster; gate_up with silu_mul in one
   * kernel) where there are weight rows enough; default on, QUIRE_CHAIN_GEMM=0 turns it off (for A/B runs).
   */
  chainGemms?: boolean;
  /**
   * A layer's norms inside its chain GEMMs (matmulAddRmsNorm) at hidden sizes from CHAIN_NORM_FROM_HIDDEN: two nodes
   * less a layer, other roundings than the norm kernel's; default on, QUIRE_CHAIN_NORM=0 turns it off (A/B runs).
   */
  chainNorms?: boolean;
  /**
   * A decode-only step's qk-norm + rope + kv write inside the decode attention kernel (one node less a layer, the
   * same bits); default on, QUIRE_FUSED_ROPE=0 turns it off (for A/B runs).
   */
  fusedRope?: boolean;
  /**
   * vLLM's --kv-cache-dtype: 'fp8_e4m3' keeps K and V as FP8 E4M3 (scale 1; sm_89+): a byte an element, half the
   * bandwidth of decode attention; the kernels' _fp8 builds write and widen it. Default 'auto' (bf16).
   */
  kvCacheDtype?: KvCacheDtype;
  /** Times every op with CUDA events (in graphs, as event-record nodes) and prints tables. */
  profile?: boolean;
  /** Which profiled steps print their table (default 'every-step'). */
  profileLog?: ProfileLogMode;
  /** Where the profile table goes; default stderr. */
  log?: (text: string) => void;
  initialWorkspaceBytes?: number;
  /** Pinned staging chunk for weight uploads (tests use small ones). */
  uploadChunkBytes?: number;
  cublasWorkspaceBytes?: number;
}

export class CudaTensor implements Tensor {
  /**
   * `scales`: an f8_e4m3 weight's block scales ([N / 128, K / 128] f32, uploadFp8Block); an f8_e4m3 activation's
   * are another tensor.
   */
  constructor(readonly shape: readonly number[], readonly ptr: bigint,
    readonly dtype: 'bf16' | 'f32' | 'f8_e4m3' = 'bf16', readonly scales = 0n) {}

  get numElements(): number {
    return this.shape.reduce((a, b) => a * b, 1);
  }

  get numBytes(): number {
    return this.numElements * BYTES_PER_ELEMENT[this.dtype];
  }

  /** A block-FP8 weight (Backend.uploadFp8Block). */
  get quantized(): 'fp8_block' | undefined {
    return this.scales !== 0n ? 'fp8_block' : undefined;
  }
}

/** What a chain producer left for the next GEMM (matmulAddRmsNorm): the norm's sums, the updated residual. */
interface PendingNorm {
  /** [T][numParts] f32: each producer block's sums of squares of its rows of the new residual. */
  parts: bigint;
  numParts: number;
  eps: number;
  residual: CudaTensor;
  weight: CudaTensor;
}

/**
 * bf16(residual * w) of a matmulAddRmsNorm: its norm's scale not yet applied, so only matmul and matmulSiluMul take
 * it (a chain consumer applies the scale, any other GEMM first runs the norm kernel on the residual); every other op
 * refuses it.
 */
class NormedTensor extends CudaTensor {
  constructor(shape: readonly number[], ptr: bigint, readonly norm: PendingNorm) {
    super(shape, ptr);
  }
}

function asCuda(t: Tensor): CudaTensor {
  if (!(t instanceof CudaTensor)) throw new Error('CudaBackend: tensor from another backend');
  if (t instanceof NormedTensor) throw new Error('CudaBackend: a GEMM input whose norm is left to that GEMM reached another op');
  return t;
}

/**
 * Threads of a norm block (kernels/norm.cu): one per 16-byte chunk of a row up to 1024 wide, 128 up to 4096 wide
 * (NORM_WIDE_THREADS), else 256. Rows of one chunk per thread sum
 * their squares alike at any width (the extra threads hold nothing), so there only occupancy changes.
 */
const NORM_WIDE_THREADS = 128;

function normThreads(hidden: number): number {
  if (hidden % 8 !== 0 || hidden > 4096) return 256;
  return hidden <= 1024 ? Math.max(32, Math.ceil(hidden / 8 / 32) * 32) : NORM_WIDE_THREADS;
}

/** Warps of a qk_norm_rope block, a head each (ROPE_WARPS in kernels/rope.cu). */
const ROPE_WARPS = 4;

/** A profile's name for an eager step: its kind and token count (rounded up to a power of two). */
function eagerShape(batch: ForwardBatch): string {
  let numTokens = 1;
  while (numTokens < batch.numTokens) numTokens *= 2;
  return `${isDecodeOnly(batch) ? 'decode' : 'prefill/mixed'} <=${numTokens} tokens`;
}

function isDecodeOnly(batch: ForwardBatch): boolean {
  for (let s = 0; s < batch.numSeqs; s++) {
    if (batch.queryStartLoc[s + 1]! - batch.queryStartLoc[s]! !== 1) return false;
  }
  return true;
}

const ATTENTION_HEAD_DIMS = [64, 128, 256];

interface KvCache {
  spec: KvCacheSpec;
  base: bigint;
  layerBytes: number;
}

export class CudaBackend implements Backend {
  readonly name = 'cuda' as const;
  readonly computeDType: DType = 'bf16';
  readonly kvCacheDtype: KvCacheDtype;
  readonly kvBytesPerElement: number;
  /** The kernels' dtype suffix: the compute type, then _fp8 for an FP8 cache (qk_norm_rope_bf16_fp8, ...). */
  private readonly kvKernels: string;
  /** An FP8 cache's decode blocks serve at most 2 query heads and load 16 e4m3 a lane (the _fp8x16 builds). */
  private readonly fp8DecodeX16: boolean;
  readonly device: Device;
  private readonly gemm: Gemm;
  private readonly cublasWorkspace: bigint;
  private readonly workspace: StepWorkspace;
  private readonly staging: HostStaging;
  private readonly profiler: Profiler | null;
  private readonly log: (text: string) => void;
  private readonly gpuMemoryUtilization: number;
  /** Free device memory before this backend allocated anything (memory-budget.ts). */
  private readonly freeAtStartBytes: number;
  private readonly activationReserveBytes: number;
  private readonly enforceEager: boolean;
  private readonly batchInvariant: boolean;
  private readonly chainGemms: boolean;
  private readonly chainNorms: boolean;
  /**
   * How gate_up's chain applies silu_mul (ChainSilu in gemm-chain.ts): pairs, or none where QUIRE_CHAIN_SILU /
   * QUIRE_CHAIN_SILU_FP8 say so for bf16 / FP8 weights (A/B runs).
   */
  private readonly chainSilu: { bf16: ChainSilu; fp8: ChainSilu };
  /** Device buffer of rowLogprobs' target ids (grown as needed). */
  private targets = 0n;
  private targetsBytes = 0;
  private readonly fusedRope: boolean;
  private readonly weights: bigint[] = [];
  private weightBytes = 0;
  private kv: KvCache | null = null;
  private uploader: WeightUploader | null = null;
  private readonly uploadChunkBytes: number | undefined;
  private kvGeneration = 0;
  private readonly steps: StepBuffers;
  private readonly metaCopied: Handle;
  private metaCopyPending = false;
  /** Recorded after each graph launch's token copy, by turns (slot 0 / 1 of meta.tokenSlots). */
  private readonly tokensCopied: [Handle, Handle];
  private tokenSlot = 0;
  private current: {
    batch: ForwardBatch;
    packed: PackedStep;
    /** Where the step's metadata sections are (step-meta.ts stepLayout): what its kernels are given. */
    layout: MetaLayout;
    ropeTable?: { invFreq: bigint; ptr: bigint };
    /** The most splits a row of the step's decode kernel needs (every layer asks; a mixed step has 16k tokens). */
    decodeMaxSplits?: number;
  } | null = null;
  private readonly invFreqs = new Map<Float32Array, bigint>();
  private readonly graphs: GraphCache;
  private capturing = false;
  numGraphReplays = 0;
  /** Layers whose qk-norm + rope ran inside the decode attention kernel (fusedRope). */
  numFusedRopes = 0;
  /** GEMMs that ran on kernels/gemm_chain.cu (launched, or recorded into a graph). */
  numChainGemms = 0;
  numGraphCaptures = 0;
  /** The most splits of a decode row in the graph being captured (its kv-length class). */
  private captureSplits = MAX_SPLITS;
  /** Wall time of the steps that captured a graph (their eager run, the capture and the instantiation). */
  graphCaptureMs = 0;
  private capturedRead: HostRead = null;
  /** The qkv buffer and layer whose k, v qkNormRope already wrote to the cache this step. */
  private kvWrittenFor: { qkv: bigint; layer: number } | null = null;
  /** qkNormRope's launch left to the decode attention kernel of the same qkv buffer and layer (fusedRope). */
  private ropeForAttention: { qkv: bigint; layer: number; rope: DecodeRope } | null = null;

  constructor(opts: CudaBackendOptions = {}) {
    this.device = new Device(opts.deviceOrdinal ?? 0);
    this.freeAtStartBytes = this.device.memInfo().freeBytes;
    this.gpuMemoryUtilization = opts.gpuMemoryUtilization ?? 0.9;
    this.activationReserveBytes = opts.activationReserveBytes ?? 1 << 30;
    this.enforceEager = opts.enforceEager ?? false;
    this.batchInvariant = opts.batchInvariant ?? false;
    this.chainGemms = opts.chainGemms ?? readKnob('QUIRE_CHAIN_GEMM');
    this.chainNorms = opts.chainNorms ?? readKnob('QUIRE_CHAIN_NORM');
    this.chainSilu = { bf16: readKnob('QUIRE_CHAIN_SILU'), fp8: readKnob('QUIRE_CHAIN_SILU_FP8') };
    this.fusedRope = opts.fusedRope ?? readKnob('QUIRE_FUSED_ROPE');
    this.kvCacheDtype = opts.kvCacheDtype ?? 'auto';
    this.kvBytesPerElement = this.kvCacheDtype === 'fp8_e4m3' ? 1 : 2;
    this.kvKernels = this.kvCacheDtype === 'fp8_e4m3' ? 'bf16_fp8' : 'bf16';
    this.fp8DecodeX16 = this.kvCacheDtype === 'fp8_e4m3';
    if (this.kvCacheDtype === 'fp8_e4m3' && this.device.arch < 89) {
      throw new Error(`an FP8 KV cache (--kv-cache-dtype fp8) needs compute capability 8.9 or later; ${this.device.name} is ${this.device.arch / 10}`);
    }
    this.uploadChunkBytes = opts.uploadChunkBytes;
    this.log = opts.log ?? ((text) => process.stderr.write(`${text}\n`));
    const cublasBytes = opts.cublasWorkspaceBytes ?? 32 << 20;
    this.cublasWorkspace = this.device.alloc(cublasBytes);
    this.gemm = new Gemm(this.cublasWorkspace, cublasBytes);
    this.workspace = new StepWorkspace(this.device, opts.initialWorkspaceBytes ?? 64 << 20);
    this.staging = new HostStaging(this.device);
    this.profiler = opts.profile ? new Profiler(this.device.api, this.device.stream, this.log, opts.profileLog) : null;
    this.steps = new StepBuffers(this.device);
    this.graphs = new GraphCache(this.device.api, this.device.stream, this.profiler);
    const event = (): Handle => {
      const ev: [Handle | null] = [null];
      check(this.device.api.cuEventCreate(ev, CU_EVENT_DISABLE_TIMING), 'cuEventCreate');
      return outPtr(ev, 'cuEventCreate');
    };
    this.metaCopied = event();
    this.tokensCopied = [event(), event()];
  }

  // ---- weights and memory ----

  upload(t: HostTensor): Tensor {
    const numElements = t.shape.reduce((a, b) => a * b, 1);
    if (t.data.byteLength !== numElements * BYTES_PER_ELEMENT[t.dtype]) {
      throw new Error(`upload ${t.name}: ${t.data.byteLength} bytes for ${t.dtype}[${t.shape.join(', ')}]`);
    }
    const bits: ArrayBufferView = t.dtype === 'bf16' ? t.data : f32ToBf16(bytesToF32(t.dtype, t.data));
    const p = this.device.alloc(bits.byteLength);
    this.device.upload(p, bits);
    this.weights.push(p);
    this.weightBytes += bits.byteLength;
    return new CudaTensor([...t.shape], p);
  }

  uploadConcat(name: string, source: WeightSource, names: readonly string[]): Tensor {
    const infos = names.map((n) => source.info(n));
    if (infos.some((i) => i.dtype !== 'bf16' || i.shape.length !== infos[0]!.shape.length)) {
      throw new Error(`uploadConcat ${name}: parts must be bf16 of one rank`);
    }
    const numRows = infos.reduce((n, i) => n + i.shape[0]!, 0);
    const shape = [numRows, ...infos[0]!.shape.slice(1)];
    const numBytes = shape.reduce((a, b) => a * b, 1) * 2;
    const p = this.device.alloc(numBytes);
    this.weights.push(p);
    this.uploader ??= new WeightUploader(this.device, this.uploadChunkBytes);
    if (this.uploader.upload(p, source, names) !== numBytes) throw new Error(`uploadConcat ${name}: size mismatch`);
    this.weightBytes += numBytes;
    return new CudaTensor(shape, p);
  }

  /**
   * A block-FP8 weight kept as it is stored: its e4m3 rows (parts concatenated) and their block scales, for
   * cuBLASLt's block-scaled FP8 GEMM (sm_90; matmul quantizes the activations to match).
   */
  uploadFp8Block(name: string, parts: readonly Fp8BlockPart[]): Tensor {
    this.checkFp8Weights(name);
    const { N, K, scales: scaleRows } = fp8DeviceScales(name, parts);
    const p = this.device.alloc(N * K);
    const scales = this.device.alloc(scaleRows.byteLength);
    this.weights.push(p, scales);
    let row = 0;
    for (const { weight } of parts) {
      this.device.upload(p + BigInt(row * K), weight.data);
      row += weight.shape[0]!;
    }
    this.device.upload(scales, scaleRows);
    this.weightBytes += N * K + scaleRows.byteLength;
    return new CudaTensor([N, K], p, 'f8_e4m3', scales);
  }

  private checkFp8Weights(name: string): void {
    if (this.device.arch < 90) {
      throw new Error(`${name}: block-FP8 weights need compute capability 9.0 (Hopper) for cuBLASLt's block-scaled FP8 GEMM; ${this.device.name} is ${this.device.arch / 10}`);
    }
    if (this.batchInvariant) throw new Error(`${name}: --batch-invariant does not run block-FP8 weights (its GEMM is bf16)`);
  }

  /**
   * --quantization fp8: the parts' rows (bf16, or another float dtype rounded to bf16 first) uploaded to a scratch
   * buffer and quantized there by kernels/quant_fp8.cu's quantize_weight_blocks_bf16 (quantizeWeightBlocks' bytes).
   */
  quantizeFp8Block(name: string, source: WeightSource, names: readonly string[]): Tensor {
    this.checkFp8Weights(name);
    const infos = names.map((n) => source.info(n));
    const K = infos[0]?.shape[1] ?? 0;
    if (infos.some((i) => i.shape.length !== 2 || i.shape[1] !== K || i.shape[0]! % FP8_BLOCK !== 0) || K % FP8_BLOCK !== 0) {
      throw new Error(`quantizeFp8Block ${name}: parts [${infos.map((i) => i.shape.join(' x ')).join(', ')}] are not ` +
        'of one width, with rows and columns multiples of 128');
    }
    const N = infos.reduce((n, i) => n + i.shape[0]!, 0);
    const scratch = this.device.alloc(N * K * 2);
    try {
      if (infos.every((i) => i.dtype === 'bf16') && source.readInto) {
        this.uploader ??= new WeightUploader(this.device, this.uploadChunkBytes);
        if (this.uploader.upload(scratch, source, names) !== N * K * 2) throw new Error(`quantizeFp8Block ${name}: size mismatch`);
      } else {
        let row = 0;
        for (const n of names) {
          const t = source.read(n);
          this.device.upload(scratch + BigInt(row * K * 2), t.dtype === 'bf16' ? t.data : f32ToBf16(bytesToF32(t.dtype, t.data)));
          row += t.shape[0]!;
        }
      }
      const rowFloats = fp8ScaleRowFloats(K);
      const p = this.device.alloc(N * K);
      const scales = this.device.alloc(N / FP8_BLOCK * rowFloats * 4);
      this.weights.push(p, scales);
      this.device.fillBytesAsync(scales, 0, N / FP8_BLOCK * rowFloats * 4);
      this.device.launch('quant_fp8.cu', 'quantize_weight_blocks_bf16', [K / FP8_BLOCK, N / FP8_BLOCK, 1], 256,
        [ptr(scratch), ptr(p), ptr(scales), i32(K), i32(rowFloats)]);
      this.weightBytes += N * K + N / FP8_BLOCK * rowFloats * 4;
      return new CudaTensor([N, K], p, 'f8_e4m3', scales);
    } finally {
      this.device.synchronize();  // the scratch is read by the kernel (and by the uploader's copies)
      this.device.free(scratch);
    }
  }

  /** A bf16 device tensor with `values` (tests, and host-built inputs). */
  fromHost(shape: readonly number[], values: Float32Array): CudaTensor {
    return asCuda(this.upload({ name: 'host', dtype: 'f32', shape: [...shape],
      data: new Uint8Array(values.buffer, values.byteOffset, values.byteLength) }));
  }

  allocateKvCache(spec: KvCacheSpec): void {
    this.uploader?.dispose();
    this.uploader = null;
    if (!ATTENTION_HEAD_DIMS.includes(spec.headDim)) {
      throw new Error(`CudaBackend: head dim ${spec.headDim} not supported (${ATTENTION_HEAD_DIMS.join(', ')})`);
    }
    if (!Number.isInteger(Math.log2(spec.blockSize))) {
      throw new Error(`CudaBackend: block size ${spec.blockSize} is not a power of two (--block-size 16 or 32)`);
    }
    if (this.kv) {
      this.device.synchronize();
      this.device.free(this.kv.base);
    }
    const layerBytes = spec.numBlocks * spec.blockSize * spec.numKvHeads * spec.headDim * this.kvBytesPerElement;
    const base = this.device.alloc(2 * spec.numLayers * layerBytes);
    this.device.fillBytesAsync(base, 0, 2 * spec.numLayers * layerBytes);
    this.kv = { spec: { ...spec }, base, layerBytes };
    this.kvGeneration++;
  }

  /** Device pointers of layer `layer`'s K and V pages. */
  kvLayer(layer: number): { k: bigint; v: bigint; spec: KvCacheSpec } {
    if (!this.kv) throw new Error('CudaBackend: allocateKvCache() first');
    const k = this.kv.base + BigInt(2 * layer * this.kv.layerBytes);
    return { k, v: k + BigInt(this.kv.layerBytes), spec: this.kv.spec };
  }

  /** Tests: fills the KV cache with `byte` (0xff: bf16 NaN) so a read of an unwritten slot shows. */
  fillKvCache(byte: number): void {
    if (!this.kv) throw new Error('CudaBackend: allocateKvCache() first');
    this.device.fillBytesAsync(this.kv.base, byte, 2 * this.kv.spec.numLayers * this.kv.layerBytes);
  }

  /** Waits for the device and merges the activation arenas that spilled into one each (after a profile run). */
  settleWorkspace(): void {
    this.device.synchronize();
    this.workspace.reset();
  }

  /** Tests: fills the activation workspace with `byte` (0xff: NaN) so an unwritten output element shows. */
  fillWorkspace(byte: number): void {
    this.workspace.fill((p, bytes) => this.device.fillBytesAsync(p, byte, bytes));
  }

  memory(): MemoryReport {
    const { freeBytes, totalBytes } = this.device.memInfo();
    const reserve = Math.max(0, this.activationReserveBytes - this.workspace.numBytes);
    const availableKvBytes = kvCacheBudget({ totalBytes, freeAtStartBytes: this.freeAtStartBytes, freeBytes,
      allocatedBytes: this.device.allocatedBytes, gpuMemoryUtilization: this.gpuMemoryUtilization, reserveBytes: reserve });
    return { availableKvBytes, totalBytes, weightBytes: this.weightBytes };
  }

  // ---- step ----

  beginStep(batch: ForwardBatch): StepInputs {
    if (this.uploader && !this.capturing) {
      this.uploader.dispose();
      this.uploader = null;
    }
    if (!this.capturing) {
      if (this.metaCopyPending) check(this.device.api.cuEventSynchronize(this.metaCopied), 'cuEventSynchronize');
      this.profiler?.finishStep();
      this.profiler?.startStep(eagerShape(batch));
      if (this.workspace.needsMerge) this.device.synchronize();
    }
    this.workspace.reset();
    this.kvWrittenFor = null;
    const layout = layoutFor(batch, this.steps.meta?.layout ?? null);
    if (layout !== this.steps.meta?.layout) this.steps.grow(layout, this.capturing);
    const meta = this.steps.meta!;
    const stepMeta = stepLayout(batch, meta.layout);
    const packed = packStep(batch, stepMeta, meta.words);
    this.timed('copies', () => this.device.copyToDeviceAsync(meta.device, meta.host, stepMeta.totalWords * 4));
    if (!this.capturing) {
      check(this.device.api.cuEventRecord(this.metaCopied, this.device.stream), 'cuEventRecord');
      this.metaCopyPending = true;
    } else {
      // a node of the graph: each replay records it once its copy is done, so the host may pack the next step
      // while the rest of this one runs (graphLaunch)
      check(this.device.api.cuEventRecordWithFlags(this.metaCopied, this.device.stream, CU_EVENT_RECORD_EXTERNAL),
        'cuEventRecordWithFlags');
    }
    this.current = { batch, packed, layout: stepMeta };
    return { batch };
  }

  /**
   * Sizes the step metadata for the largest step the engine will run, so it never
   * grows later (growing it invalidates every captured graph).
   */
  reserveStepCapacity(numTokens: number, numSeqs: number, maxBlocksPerSeq: number): void {
    const layout = layoutAtLeast(this.steps.meta?.layout ?? null, numTokens, numSeqs, maxBlocksPerSeq);
    if (layout !== this.steps.meta?.layout) this.steps.grow(layout, this.capturing);
  }

  private stepOf(step: StepInputs): { batch: ForwardBatch; packed: PackedStep; layout: MetaLayout; meta: Meta } {
    const meta = this.steps.meta;
    if (!this.current || this.current.batch !== step.batch || !meta) {
      throw new Error('CudaBackend: op called with a step other than the current one (beginStep first)');
    }
    return { ...this.current, meta };
  }

  private act(shape: number[], dtype: 'bf16' | 'f32' | 'f8_e4m3' = 'bf16'): CudaTensor {
    const bytes = shape.reduce((a, b) => a * b, 1) * BYTES_PER_ELEMENT[dtype];
    return new CudaTensor(shape, this.workspace.alloc(bytes), dtype);
  }

  private timed<T>(bucket: string, fn: () => T): T {
    return this.profiler ? this.profiler.time(bucket, fn) : fn();
  }

  beginLayer(layer: number): void {
    this.workspace.beginLayer(layer);
  }

  endLayers(): void {
    this.workspace.endLayers();
  }

  // ---- ops ----

  embedding(table: Tensor, step: StepInputs): Tensor {
    const { batch, meta, layout } = this.stepOf(step);
    const w = asCuda(table);
    const hidden = w.shape[1]!;
    const out = this.act([batch.numTokens, hidden]);
    this.timed('embedding', () => this.device.launch('embedding.cu', 'embedding_bf16', [batch.numTokens, 1, 1], 256,
      [ptr(w.ptr), ptr(metaPtr(meta, layout.inputIds)), ptr(meta.sampledIds), ptr(out.ptr), i32(hidden)], 0, true));
    return out;
  }

  rmsNorm(x: Tensor, w: Tensor, eps: number): Tensor {
    const xs = asCuda(x);
    const [T, hidden] = [xs.shape[0]!, xs.shape[1]!];
    const out = this.act([T, hidden]);
    this.timed('norm', () => this.device.launch('norm.cu', 'rms_norm_bf16', [T, 1, 1], normThreads(hidden),
      [ptr(xs.ptr), ptr(asCuda(w).ptr), ptr(out.ptr), i32(hidden), f32(eps)], 0, true));
    return out;
  }

  addRmsNorm(x: Tensor, residual: Tensor, w: Tensor, eps: number): Tensor {
    const xs = asCuda(x);
    const [T, hidden] = [xs.shape[0]!, xs.shape[1]!];
    const out = this.act([T, hidden]);
    this.timed('norm', () => this.device.launch('norm.cu', 'add_rms_norm_bf16', [T, 1, 1], normThreads(hidden),
      [ptr(xs.ptr), ptr(asCuda(residual).ptr), ptr(asCuda(w).ptr), ptr(out.ptr), i32(hidden), f32(eps)], 0, true));
    return out;
  }

  /** y[T, N] = x[T, K] * w[N, K]^T (+ bias[N] before the rounding); `label` names the projection in profiles. */
  matmul(x: Tensor, w: Tensor, label?: string, bias?: Tensor | null): Tensor {
    if (x instanceof NormedTensor) {
      const out = this.normedChain(x, asCuda(w), label ?? 'normed', 'none', bias ? asCuda(bias) : null);
      if (out) return out;
      x = this.materialize(x);
    }
    const xs = asCuda(x);
    const ws = asCuda(w);
    const [T, K] = [xs.shape[0]!, xs.shape[1]!];
    const N = ws.shape[0]!;
    if (ws.shape[1] !== K) throw new Error(`matmul: x [${xs.shape.join(', ')}] w [${ws.shape.join(', ')}]`);
    const b = bias ? asCuda(bias) : null;
    if (b && b.numElements !== N) throw new Error(`matmul: bias [${b.shape.join(', ')}] for ${N} outputs`);
    if (ws.dtype === 'f8_e4m3') {
      if (b) throw new Error(`matmul: a bias with block-FP8 weights (${label ?? `N=${N} K=${K}`})`);
      return this.matmulFp8(xs, ws, label ?? `N=${N} K=${K}`);
    }
    const out = this.act([T, N]);
    if (T > 0) {
      this.timed(`gemm ${label ?? `N=${N} K=${K}`}`, () => {
        if (!this.batchInvariant) {
          const chain = this.chainPlan(T, N, K);  // bf16 weights only (FP8 took matmulFp8 above)
          if (chain) this.launchChain(chain, xs, ws, out, T, N, K, b);
          else this.gemm.run(xs.ptr, ws.ptr, out.ptr, T, N, K, this.device.stream, b?.ptr ?? 0n);
          return;
        }
        const plan = planGemmRows(T, N, K);
        this.device.launch('gemm_rows.cu', plan.kernel, plan.grid, plan.block, [ptr(xs.ptr), ptr(ws.ptr),
          ptr(out.ptr), ptr(b?.ptr ?? 0n), i32(T), i32(N), i32(K), i32(plan.sliceChunks)], plan.sharedBytes);
      });
    }
    return out;
  }

  /**
   * x w^T (or, siluMul, silu(gate) * up of w's halves) for a block-FP8 w: x quantized per token and 128 columns
   * (kernels/quant_fp8.cu), then the chain kernel's _fp8 build for up to 8 tokens, else cuBLASLt's block-scaled GEMM.
   * cuBLASLt takes token counts that are multiples of 4 (measured on sm_90, cuBLAS 13.1), so it runs on up to 3 rows
   * more, whose inputs and outputs no one reads (each output row depends on its own token only).
   */
  private matmulFp8(x: CudaTensor, w: CudaTensor, label: string, siluMul = false): CudaTensor {
    const [T, K] = [x.shape[0]!, x.shape[1]!];
    const N = w.shape[0]!;
    const rows = Math.ceil(T / 4) * 4;
    const silu = siluMul ? this.chainSilu.fp8 : 'none';
    const chain = this.chainGemms && (!siluMul || silu !== 'none')
      ? planChainGemm(T, N, K, this.device.numSMs, silu, true) : null;
    if (siluMul && !chain) return asCuda(this.siluMul(this.matmulFp8(x, w, label)));
    const out = this.act([rows, siluMul ? N / 2 : N]);
    if (T === 0) return out;
    const groups = K / FP8_BLOCK;
    const xq = this.act([rows, K], 'f8_e4m3');
    const xScales = this.act([groups, rows], 'f32');
    this.timed('quantize', () => this.device.launch('quant_fp8.cu', 'quantize_fp8_groups_bf16',
      [T, Math.ceil(groups / 4), 1], 128, [ptr(x.ptr), ptr(xq.ptr), ptr(xScales.ptr), i32(K), i32(rows)], 0, true));
    this.timed(`gemm ${label}`, () => {
      if (!chain) {
        this.gemm.runFp8(xq.ptr, xScales.ptr, w.ptr, w.scales, out.ptr, rows, N, K, this.device.stream);
        return;
      }
      this.numChainGemms++;
      this.device.launch('gemm_chain.cu', chain.kernel, chain.grid, chain.block, [ptr(xq.ptr), ptr(w.ptr), ptr(out.ptr),
        ptr(xScales.ptr), ptr(w.scales), i32(rows), i32(fp8ScaleRowFloats(K)), i32(T), i32(N), i32(K)], chain.sharedBytes,
      true);
    });
    return new CudaTensor([T, siluMul ? N / 2 : N], out.ptr);
  }

  private invFreqPtr(rope: RopeSpec): bigint {
    let p = this.invFreqs.get(rope.invFreq);
    if (p === undefined) {
      if (this.capturing) throw new Error('rope table first seen during graph capture');
      p = this.device.alloc(rope.invFreq.byteLength);
      this.device.upload(p, rope.invFreq);
      this.invFreqs.set(rope.invFreq, p);
      this.weights.push(p);
    }
    return p;
  }

  /**
   * The step's rope angles (kernels/rope.cu rope_table): computed by the step's first qkNormRope, read by
   * every layer's.
   */
  private ropeTable(invFreq: bigint, numTokens: number, half: number, positions: KernelArg): bigint {
    const cur = this.current!;
    if (cur.ropeTable?.invFreq === invFreq) return cur.ropeTable.ptr;
    const table = this.workspace.allocForStep(numTokens * 2 * half * 4);
    this.device.launch('rope.cu', 'rope_table', [Math.ceil((numTokens * half) / 256), 1, 1], 256,
      [ptr(invFreq), positions, ptr(table), i32(numTokens), i32(half)], 0, true);
    cur.ropeTable = { invFreq, ptr: table };
    return table;
  }

  qkNormRope(qkv: Tensor, qNorm: Tensor | null, kNorm: Tensor | null, eps: number, numHeads: number,
    numKvHeads: number, rope: RopeSpec, step: StepInputs, kvLayer?: number): void {
    const { batch, packed, meta, layout } = this.stepOf(step);
    const q = asCuda(qkv);
    const D = rope.headDim;
    if (D % 64 !== 0 || D > 256) throw new Error(`qkNormRope: head dim ${D} is not a multiple of 64 up to 256`);
    const applyNorm = qNorm !== null && kNorm !== null;
    const invFreq = this.invFreqPtr(rope);
    const cache = kvLayer === undefined ? { k: 0n, v: 0n } : this.kvLayer(kvLayer);
    const T = batch.numTokens;
    const grid: [number, number, number] = [T, Math.ceil((numHeads + numKvHeads) / ROPE_WARPS), 1];
    const positions = ptr(metaPtr(meta, layout.positions));
    // A decode-only step's rows all go to the decode kernel (attention()): it ropes them itself.
    const fuse = this.fusedRope && kvLayer !== undefined && packed.decodeOnly && packed.numDecodeRows === T;
    this.timed('rope', () => {
      const table = this.ropeTable(invFreq, T, D / 2, positions);
      if (fuse) {
        this.ropeForAttention = { qkv: q.ptr, layer: kvLayer, rope: { table, eps,
          qNorm: applyNorm ? asCuda(qNorm).ptr : 0n, kNorm: applyNorm ? asCuda(kNorm).ptr : 0n } };
        this.numFusedRopes++;
        return;
      }
      this.device.launch('rope.cu', `qk_norm_rope_${this.kvKernels}`, grid, ROPE_WARPS * 32, [ptr(q.ptr),
        ptr(qNorm ? asCuda(qNorm).ptr : 0n), ptr(kNorm ? asCuda(kNorm).ptr : 0n), i32(applyNorm ? 1 : 0), ptr(invFreq),
        positions, ptr(cache.k), ptr(cache.v), ptr(metaPtr(meta, layout.slotMapping)), i32(numHeads),
        i32(numKvHeads), i32(D), f32(eps), ptr(table)], 0, true);
    });
    this.kvWrittenFor = kvLayer === undefined ? null : { qkv: q.ptr, layer: kvLayer };
  }

  /**
   * Grid z of the decode kernel for `numRows` (token, head) rows. Every
   * row's splits follow its own kv length (decode-splits.ts), so this changes
   * how blocks share the work, never a result.
   */
  decodeSplits(numRows: number, maxRowSplits: number): number {
    return decodeGridZ(numRows, this.device.numSMs, maxRowSplits);
  }

  attention(qkv: Tensor, layer: number, numHeads: number, numKvHeads: number, scale: number,
    step: StepInputs): Tensor {
    const { batch, packed, meta, layout } = this.stepOf(step);
    const q = asCuda(qkv);
    const { k, v, spec } = this.kvLayer(layer);
    const D = q.shape[1]! / (numHeads + 2 * numKvHeads);
    if (D !== spec.headDim) throw new Error(`attention: head dim ${D}, cache has ${spec.headDim}`);
    const T = batch.numTokens;
    const L = layout;
    const out = this.act([T, numHeads * D]);
    const kvWritten = this.kvWrittenFor?.qkv === q.ptr && this.kvWrittenFor.layer === layer;
    this.kvWrittenFor = null;
    const fused = this.ropeForAttention;
    this.ropeForAttention = null;
    if (fused && (fused.qkv !== q.ptr || fused.layer !== layer)) {
      throw new Error(`attention: layer ${layer} follows the fused rope of layer ${fused.layer} (another qkv)`);
    }
    this.timed('attention', () => {
      if (!kvWritten) {
        this.device.launch('kv_write.cu', `kv_write_${this.kvKernels}`, [T, 1, 1], 256, [ptr(q.ptr), ptr(k), ptr(v),
          ptr(metaPtr(meta, L.slotMapping)), i32(numHeads), i32(numKvHeads), i32(D)]);
      }
      // One-token rows (decode rows, also those of a mixed step) go through the decode kernel, so a decode row's
      // bits do not depend on whether prompt chunks share its step; the prefill kernel takes the other rows' tiles.
      // The batch-invariant mode runs every row through the decode kernel: a row's result then follows its own kv
      // length alone, whatever chunk or step it came in.
      const launch = { qkv: q.ptr, k, v, out: out.ptr, meta: meta.device, layout: L, numHeads, numKvHeads, headDim: D,
        blockSize: spec.blockSize, scale, kvKernels: this.kvKernels, decodeX16: this.fp8DecodeX16 };
      const decodeRows = this.batchInvariant ? T : packed.numDecodeRows;
      if (decodeRows < T) launchPrefillAttention(this.device, launch, packed.numTiles);
      if (decodeRows > 0) {
        const G = decodeGroup(decodeRows, numHeads, numKvHeads, this.device.numSMs, D, this.fp8DecodeX16 ? 2 : 8);
        if (numHeads / G > MAX_DECODE_ROWS_PER_TOKEN) throw new Error(`attention: ${numHeads} heads exceed the decode row counters`);
        // Blocks publish split states only when the grid may give a row several blocks; the test is a function
        // of the row count alone, so eager and captured steps of one size allocate alike.
        const numRows = decodeRows * (numHeads / G);
        const mayShare = this.decodeSplits(numRows, MAX_SPLITS) > 1;
        // A graph replays with longer kv lengths than it was captured with: it plans for the most splits of its class.
        const maxRowSplits = this.capturing ? this.captureSplits : this.current!.decodeMaxSplits ??=
          maxSplitsOf(batch.positions, meta.words.subarray(L.rowOrder, L.rowOrder + decodeRows));
        // the batch-invariant mode's rows are tokens (up to capTokens): its few-row steps take theirs from the workspace
        const partials = !this.batchInvariant ? this.steps.partials(meta, numHeads, D, this.capturing) : !mayShare ? { out: 0n, ml: 0n }
          : { out: this.act([decodeRows, numHeads, MAX_SPLITS, D], 'f32').ptr, ml: this.act([decodeRows, numHeads, MAX_SPLITS, 2], 'f32').ptr };
        launchDecodeAttention(this.device, launch, { G, rows: decodeRows, gridZ: this.decodeSplits(numRows, maxRowSplits),
          partialOut: partials.out, partialMl: partials.ml, rowCounters: meta.rowCounters,
          dependent: decodeAsDependent(this.batchInvariant, packed.decodeOnly) }, fused?.rope);
      }
    });
    return out;
  }

  /**
   * The chain kernel's plan (kernels/gemm_chain.cu) where it is on and applies, else null (cuBLASLt, gemm_rows). A
   * bf16 plan that splits k between two warps is taken only where its grid runs in one wave of blocks (qwen3-8b's qkv,
   * 384 tiles of 96 KiB blocks at 2 a SM, would take two), else the unsplit one.
   */
  private chainPlan(T: number, N: number, K: number, silu: ChainSilu = 'none'): ChainGemmLaunch | null {
    if (!this.chainGemms || this.batchInvariant) return null;
    const plan = planChainGemm(T, N, K, this.device.numSMs, silu);
    if (plan === null || !plan.kernel.endsWith('_s2')) return plan;
    const fit = this.device.blocksPerSM('gemm_chain.cu', plan.kernel, plan.block, plan.sharedBytes) * this.device.numSMs;
    return plan.grid[0] <= fit ? plan : planChainGemm(T, N, K, this.device.numSMs, silu, false, false);
  }

  /**
   * A bf16 chain launch; `norm`: as a producer (`out`: its residual, norm weight and parts, kernels/gemm_chain.cu's
   * ChainNormOut) or a consumer (`in`: a producer's pending norm, its parts in shared memory after the ring).
   */
  private launchChain(plan: ChainGemmLaunch, x: CudaTensor, w: CudaTensor, out: CudaTensor, T: number, N: number,
    K: number, bias: CudaTensor | null = null,
    norm: { out?: { residual: CudaTensor; weight: CudaTensor; parts: CudaTensor }; in?: PendingNorm } = {}): void {
    this.numChainGemms++;
    const extra = norm.in ? chainNormPartsBytes(T, norm.in.numParts) : 0;
    this.device.launch('gemm_chain.cu', plan.kernel, plan.grid, plan.block,
      [ptr(x.ptr), ptr(w.ptr), ptr(out.ptr), ptr(bias?.ptr ?? 0n), i32(T), i32(N), i32(K),
        ptr(norm.out?.residual.ptr ?? 0n), ptr(norm.out?.weight.ptr ?? 0n), ptr(norm.out?.parts.ptr ?? 0n),
        ptr(norm.in?.parts ?? 0n), i32(norm.in?.numParts ?? 0), f32(norm.in?.eps ?? 0)], plan.sharedBytes + extra, true);
  }

  /**
   * addRmsNorm(matmul(x, w, label, bias), residual, normW, eps), the norm inside the chain kernels where a step's few
   * tokens take them and the hidden size is CHAIN_NORM_FROM_HIDDEN or more: this GEMM adds its outputs into the
   * residual and writes them times normW, each block its rows' sums of squares, and the next GEMM (matmul or
   * matmulSiluMul, a chain consumer) sums those to the norm's scale and applies it to its sums (kernels/gemm_chain.cu).
   * The residual's bits are add_rms_norm's; the next GEMM's outputs are within bf16 rounding of the norm kernel's path.
   */
  matmulAddRmsNorm(x: Tensor, w: Tensor, label: string, bias: Tensor | null, residual: Tensor, normW: Tensor,
    eps: number): Tensor {
    const xs = asCuda(x);
    const ws = asCuda(w);
    const [T, K] = [xs.shape[0]!, xs.shape[1]!];
    const N = ws.shape[0]!;
    const plan = this.chainNorms && ws.dtype === 'bf16' && ws.shape[1] === K && T > 0 && N >= CHAIN_NORM_FROM_HIDDEN
      ? this.chainPlan(T, N, K) : null;
    if (!plan || !chainNormRole(plan).producer) return this.addRmsNorm(this.matmul(x, w, label, bias), residual, normW, eps);
    const b = bias ? asCuda(bias) : null;
    if (b && b.numElements !== N) throw new Error(`matmul: bias [${b.shape.join(', ')}] for ${N} outputs`);
    const res = asCuda(residual);
    const weight = asCuda(normW);
    if (res.numElements !== T * N || weight.numElements !== N) {
      throw new Error(`matmulAddRmsNorm: residual [${res.shape.join(', ')}], norm weight [${weight.shape.join(', ')}] for [${T}, ${N}]`);
    }
    const out = this.act([T, N]);
    const parts = this.act([T, plan.grid[0]], 'f32');
    this.timed(`gemm ${label}`, () => this.launchChain(plan, xs, ws, out, T, N, K, b, { out: { residual: res, weight, parts } }));
    return new NormedTensor([T, N], out.ptr, { parts: parts.ptr, numParts: plan.grid[0], eps, residual: res, weight });
  }

  /** A consumer chain of a pending norm's input (silu 'none': matmul), or null where none takes it. */
  private normedChain(x: NormedTensor, w: CudaTensor, label: string, silu: ChainSilu, bias: CudaTensor | null = null):
    CudaTensor | null {
    const [T, K] = [x.shape[0]!, x.shape[1]!];
    const N = w.shape[0]!;
    if (w.dtype !== 'bf16' || w.shape[1] !== K || (bias && bias.numElements !== N)) return null;
    const plan = this.chainPlan(T, N, K, silu);
    if (!plan || !chainNormRole(plan).consumer) return null;
    const out = this.act([T, silu === 'none' ? N : N / 2]);
    this.timed(`gemm ${label}`, () => this.launchChain(plan, x, w, out, T, N, K, bias, { in: x.norm }));
    return out;
  }

  /** A pending norm's input for a GEMM that cannot apply its scale: the norm kernel on the updated residual. */
  private materialize(x: NormedTensor): CudaTensor {
    return asCuda(this.rmsNorm(x.norm.residual, x.norm.weight, x.norm.eps));
  }

  /** silu(x gate^T) * (x up^T) for gateUp [2I, K] (gate rows first): one chain kernel for a few tokens. */
  matmulSiluMul(x: Tensor, gateUp: Tensor): Tensor {
    if (x instanceof NormedTensor) {
      const out = this.chainSilu.bf16 !== 'none' ? this.normedChain(x, asCuda(gateUp), 'gate_up + silu', this.chainSilu.bf16) : null;
      if (out) return out;
      x = this.materialize(x);
    }
    const xs = asCuda(x);
    const ws = asCuda(gateUp);
    const [T, K] = [xs.shape[0]!, xs.shape[1]!];
    const N = ws.shape[0]!;
    if (ws.dtype === 'f8_e4m3' && ws.shape[1] === K) return this.matmulFp8(xs, ws, 'gate_up', true);
    const silu = this.chainSilu.bf16;
    const chain = ws.shape[1] === K && silu !== 'none' ? this.chainPlan(T, N, K, silu) : null;
    if (!chain) return this.siluMul(this.matmul(x, gateUp, 'gate_up'));
    const out = this.act([T, N / 2]);
    this.timed('gemm gate_up + silu', () => this.launchChain(chain, xs, ws, out, T, N, K));
    return out;
  }

  siluMul(gateUp: Tensor): Tensor {
    const g = asCuda(gateUp);
    const [T, twoI] = [g.shape[0]!, g.shape[1]!];
    const I = twoI / 2;
    const out = this.act([T, I]);
    const perThread = I % 8 === 0 ? 8 : 1;  // bf16 columns per thread: 16-byte loads (kernels/activation.cu)
    this.timed('activation', () => this.device.launch('activation.cu', 'silu_mul_bf16',
      [Math.ceil((T * I) / (256 * perThread)), 1, 1], 256, [ptr(g.ptr), ptr(out.ptr), i32(T), i32(I)], 0, true));
    return out;
  }

  gatherLogitRows(x: Tensor, step: StepInputs): Tensor {
    const { batch, meta, layout } = this.stepOf(step);
    const xs = asCuda(x);
    const hidden = xs.shape[1]!;
    const numRows = batch.logitsIndices.length;
    const out = this.act([numRows, hidden]);
    this.timed('sampling', () => this.device.launch('embedding.cu', 'gather_rows_bf16', [numRows, 1, 1], 256,
      [ptr(xs.ptr), ptr(metaPtr(meta, layout.logitsIndices)), ptr(out.ptr), i32(hidden)], 0, true));
    return out;
  }

  /** Tokens per logits row on the GPU (kernels/sample.cu); only R int32 reach the host. */
  sampleTokens(logits: Tensor, step: StepInputs): Int32Array {
    const { R, ids } = this.launchSampling(logits, step);
    if (this.capturing) {
      // copied to the host by graphLaunch after the graph, into one of two slots, so a step launched before
      // this one's tokens are read cannot overwrite them
      this.capturedRead = { numElements: R, dtype: 'i32', src: ids };
      return new Int32Array(R);
    }
    const view = this.readToHost(ids, R * 4);
    return new Int32Array(view.slice(0, R * 4));
  }

  /**
   * sampleTokens without waiting for the step: its tokens go to one of the two pinned slots graph steps use, with
   * that slot's event, so the host schedules and launches the next step while this one runs. Call the returned
   * function before the step after next is launched.
   */
  sampleTokensAsync(logits: Tensor, step: StepInputs): () => Int32Array {
    if (this.capturing) throw new Error('CudaBackend: sampleTokensAsync during graph capture');
    const { R, ids } = this.launchSampling(logits, step);
    return this.readTokensLater(ids, R);
  }

  private launchSampling(logits: Tensor, step: StepInputs): { R: number; ids: bigint } {
    const { meta, layout } = this.stepOf(step);
    const l = asCuda(logits);
    const [R, vocab] = [l.shape[0]!, l.shape[1]!];
    const ids = meta.sampledIds;  // where the next step's negative input ids read them
    if (R > 0) {
      this.timed('sampling', () => this.device.launch('sample.cu', `sample_tokens_${l.dtype}`, [R, 1, 1], 1024,
        [ptr(l.ptr), i32(vocab), ptr(metaPtr(meta, layout.sampling)), i32(layout.capTokens), ptr(ids)], 0, true));
    }
    return { R, ids };
  }

  /** Copies `n` token ids from `src` into the next of two pinned slots and returns what waits for them. */
  private readTokensLater(src: bigint, n: number, done?: () => void): () => Int32Array {
    const meta = this.steps.meta!;
    const slot = this.tokenSlot;
    this.tokenSlot ^= 1;
    const bytes = n * 4;
    const at = slot * meta.layout.capTokens * 4;
    check(this.device.api.cuMemcpyDtoHAsync_v2(meta.tokenSlots.ptr + BigInt(at), src, bytes, this.device.stream),
      'cuMemcpyDtoHAsync_v2');
    check(this.device.api.cuEventRecord(this.tokensCopied[slot]!, this.device.stream), 'cuEventRecord');
    const slots = meta.tokenSlots;  // outgrown slots live until dispose (StepBuffers)
    return () => {
      check(this.device.api.cuEventSynchronize(this.tokensCopied[slot]!), 'cuEventSynchronize');
      if (done) done();
      else this.profiler?.finishStep();
      return new Int32Array(slots.view.slice(at, at + bytes));
    };
  }

  private readToHost(src: bigint, bytes: number): ArrayBuffer {
    const staging = this.staging.ensure(bytes, this.capturing);
    this.timed('copies', () => this.device.copyToHostAsync(staging, src, bytes));
    if (this.capturing) return staging.view;
    this.device.synchronize();
    this.profiler?.finishStep();
    return staging.view;
  }

  toHost(t: Tensor): Float32Array {
    const c = asCuda(t);
    if (c.dtype === 'f8_e4m3') throw new Error('toHost: an f8_e4m3 tensor');
    const view = this.readToHost(c.ptr, c.numBytes);
    if (this.capturing) {
      this.capturedRead = { numElements: c.numElements, dtype: c.dtype };
      return new Float32Array(c.numElements);
    }
    return c.dtype === 'bf16' ? bf16BytesToF32(view, c.numElements) : new Float32Array(view.slice(0, c.numBytes));
  }

  toHostRows(t: Tensor, first: number, count: number): Float32Array {
    const c = asCuda(t);
    const n = c.shape[1]!;
    const bytes = BYTES_PER_ELEMENT[c.dtype];
    return this.toHost(new CudaTensor([count, n], c.ptr + BigInt(first * n * bytes), c.dtype));
  }

  /** Prompt logprobs by kernels/sample.cu's row_logprobs: only 2 + 2 numTop int32 a row reach the host. */
  rowLogprobs(logits: Tensor, first: number, targets: Int32Array, numTop: number): Int32Array {
    const l = asCuda(logits);
    const n = targets.length;
    const width = 2 + 2 * numTop;
    if (this.targetsBytes < n * 4) {
      if (this.targets !== 0n) this.device.free(this.targets);
      this.targetsBytes = Math.max(n * 4, 4096);
      this.targets = this.device.alloc(this.targetsBytes);
    }
    this.device.upload(this.targets, targets);
    const out = this.act([n * width], 'f32');
    this.timed('sampling', () => this.device.launch('sample.cu', `row_logprobs_${l.dtype}`, [n, 1, 1], 256,
      [ptr(l.ptr), i32(l.shape[1]!), i32(first), ptr(this.targets), i32(numTop), ptr(out.ptr)], 0, true));
    return new Int32Array(this.readToHost(out.ptr, n * width * 4).slice(0, n * width * 4));
  }

  /** Device-to-device copy bandwidth, bytes read + written per second. */
  copyBandwidth(): number {
    return firstThatFits(COPY_BANDWIDTH_BYTES, (bytes) => measureCopyBandwidth(this.device, bytes));
  }

  /** bf16 GEMM rate of the backend's GEMM path on 8192^3, FLOP/s. */
  gemmPeak(): number {
    return gemmFlops(this.device, (x, w, y, n) => this.gemm.run(x, w, y, n, n, n, this.device.stream));
  }

  /** The last profiled step's table (profile mode). */
  get lastProfile(): Profiler['last'] {
    return this.profiler?.last ?? null;
  }

  // ---- CUDA graphs ----

  private generation(): string {
    return `${this.workspace.generation}:${this.steps.generation}:${this.kvGeneration}:${this.staging.generation}`;
  }

  /**
   * Runs a decode step `record` (a forward pass over `batch` that calls beginStep
   * and ends in one toHost or sampleTokens) through a CUDA graph cached under
   * `key` (the padded batch size, and what the step returns). The first call for a key runs eagerly, then captures; later
   * calls stage the batch's metadata into the pinned buffer the graph copies
   * from, launch the graph and read its result. Returns what toHost returned.
   */
  graph<R extends Float32Array | Int32Array>(key: number, batch: ForwardBatch, record: () => R): R {
    if (this.enforceEager || !isDecodeOnly(batch)) return record();
    const launched = this.graphLaunch(key, batch);
    if (launched) return launched() as R;
    const short = shortGraphRows(batch.positions);
    this.graphs.destroy(graphKey(key, short));
    const t0 = performance.now();
    const result = record();
    this.device.synchronize();
    this.workspace.reset();
    this.captureSplits = short ? SHORT_GRAPH_SPLITS : MAX_SPLITS;
    this.capture(graphKey(key, short), record,
      `graph ${key}${!short && GRAPH_KV_CLASSES ? `, kv over ${SHORT_GRAPH_KV}` : ''}`);
    this.numGraphCaptures++;
    this.graphCaptureMs += performance.now() - t0;
    return result;
  }

  /**
   * Launches the graph captured under `key` for `batch` without waiting for it;
   * returns the function that waits and reads its result (call it before the
   * next step), or null when no valid graph is cached (use graph()).
   */
  graphLaunch(key: number, batch: ForwardBatch): (() => Float32Array | Int32Array) | null {
    if (this.enforceEager || !isDecodeOnly(batch)) return null;
    const g = this.graphs.get(graphKey(key, shortGraphRows(batch.positions)));
    if (!g || g.generation !== this.generation() || !g.hostRead ||
      layoutFor(batch, this.steps.meta?.layout ?? null) !== this.steps.meta?.layout) return null;
    const meta = this.steps.meta!;
    if (this.metaCopyPending) check(this.device.api.cuEventSynchronize(this.metaCopied), 'cuEventSynchronize');
    const startMs = performance.now();
    const layout = stepLayout(batch, meta.layout);  // the capture's: its batch was padded to this bucket too
    this.current = { batch, packed: packStep(batch, layout, meta.words), layout };
    check(this.device.api.cuGraphLaunch(g.exec, this.device.stream), 'cuGraphLaunch');
    this.metaCopyPending = true;  // the graph records metaCopied after its copy of the packed step
    this.numGraphReplays++;
    const read = g.hostRead;
    if (read.src !== undefined) {
      // tokens: one of two slots and its own event, so this step's wait does not wait for a step launched after it
      return this.readTokensLater(read.src, read.numElements, () => {
        if (g.timings) this.profiler?.finishReplay(g.timings, startMs);
      });
    }
    return () => {
      const bytes = read.numElements * (read.dtype === 'i32' ? 4 : BYTES_PER_ELEMENT[read.dtype]);
      const view = this.staging.ensure(bytes, true).view;
      this.device.synchronize();
      if (g.timings) this.profiler?.finishReplay(g.timings, startMs);
      this.metaCopyPending = false;
      if (read.dtype === 'i32') return new Int32Array(view.slice(0, bytes));
      return read.dtype === 'bf16' ? bf16BytesToF32(view, read.numElements) : new Float32Array(view.slice(0, bytes));
    };
  }

  private capture(key: number, record: () => Float32Array | Int32Array, label: string): void {
    this.graphs.capture(key, this.generation(), () => {
      this.capturedRead = null;
      this.capturing = true;
      this.workspace.frozen = true;
      try {
        record();
      } finally {
        this.capturing = false;
        this.workspace.frozen = false;
      }
      return this.capturedRead;
    }, label);
  }

  get numGraphs(): number {
    return this.graphs.size;
  }

  dispose(): void {
    this.device.synchronize();
    this.uploader?.dispose();
    this.uploader = null;
    this.graphs.dispose();
    this.profiler?.dispose();
    for (const p of this.weights) this.device.free(p);
    this.weights.length = 0;
    if (this.kv) this.device.free(this.kv.base);
    this.kv = null;
    if (this.targets !== 0n) this.device.free(this.targets);
    this.targets = 0n;
    this.steps.dispose();
    this.workspace.dispose();
    this.staging.dispose();
    this.gemm.dispose();
    this.device.free(this.cublasWorkspace);
    this.device.api.cuEventDestroy_v2(this.metaCopied);
    for (const e of this.tokensCopied) this.device.api.cuEventDestroy_v2(e);
    this.device.dispose();
  }
}
