// The CUDA backend: bf16 activations and weights, fp32 accumulation. This file composes the parts, each its own
// file: the step's shared context (step-context.ts), weights (weights.ts), the KV cache's memory (kv-memory.ts),
// GEMMs and norms (gemm.ts), attention (attention-ops.ts), mixture of experts (moe.ts), gated DeltaNet
// (deltanet.ts, its states in kv-memory.ts), sampling and reads
// (sampling.ts), CUDA graphs (graphs.ts); it implements Backend by handing each op to its part.

import type { GgufGemmOptionsIn } from './gguf-gemm.js';
import type { ByteSegment, GgufBlocks, HostTensor, WeightSource } from '../../loader/types.js';
import type { KvCacheDtype } from '../../loader/fp8.js';
import type { ForwardBatch, KvCacheSpec } from '../batch.js';
import type { Backend, DeltaNetGate, DeltaNetShape, DeviceProbes, Fp8BlockPart, MemoryReport, MoeExperts, MoeRoute,
  RecurrentStateLayout, RopeSpec, SsmCacheDtype, StepInputs, Tensor, TensorParallelRank } from '../backend.js';
import { CudaAttention } from './attention-ops.js';
import type { DecodeMma } from './attention-launch.js';
import { CudaHiddenCarry } from './carry.js';
import { chunkedFromFor, CudaDeltaNet } from './deltanet.js';
import { COPY_BANDWIDTH_BYTES, copyBandwidth as measureCopyBandwidth, firstThatFits, gemmFlops } from './bandwidth.js';
import { Device } from './device.js';
import { CudaGemms } from './gemm.js';
import { CudaGraphs } from './graphs.js';
import { KvMemory } from './kv-memory.js';
import { combineFusesNorm, CudaMoe } from './moe.js';
import type { ProfileLogMode } from './profiler.js';
import { CudaSampling } from './sampling.js';
import { StepContext } from './step-context.js';
import type { CudaTensor } from './tensor.js';
import { CudaWeights } from './weights.js';

export { CudaTensor } from './tensor.js';

export interface CudaBackendOptions {
  deviceOrdinal?: number;
  /** Fraction of the device's memory this engine may hold (weights + workspace + KV), as vLLM's flag. */
  gpuMemoryUtilization?: number;
  /** Kept free for activations when reporting availableKvBytes (minus what the workspace already holds). */
  activationReserveBytes?: number;
  /** Disables CUDA graphs: graphs.run just runs its function. */
  enforceEager?: boolean;
  /**
   * Every GEMM on kernels/gemm_rows.cu, whose sums follow K alone, instead of cuBLASLt, and prompt rows'
   * attention on the decode kernel: a row's output bits no longer depend on how many rows share its step or
   * how its prompt was chunked (slower beyond ~16 rows and for long prompts; docs/perf-log.md).
   */
  batchInvariant?: boolean;
  /** GEMMs of up to 8 tokens on kernels/gemm_chain.cu; default QUIRE_CHAIN_GEMM (on). */
  chainGemms?: boolean;
  /** A layer's norms inside its chain GEMMs; default QUIRE_CHAIN_NORM (on). */
  chainNorms?: boolean;
  /** Split chains past one wave on 8-stage _s2 builds (CudaGemms.chainPlan); default QUIRE_CHAIN_SHORT_RING (on). */
  chainShortRing?: boolean;
  /** GGUF GEMMs (gguf-gemm.ts): the most tokens on the GEMV (QUIRE_GGUF_GEMV_TOKENS), its split, the dequantized weight's scratch. */
  gguf?: GgufGemmOptionsIn;
  /** A decode-only step's qk-norm + rope + kv write inside the decode attention kernel; default QUIRE_FUSED_ROPE (on). */
  fusedRope?: boolean;
  /** Decode attention's rounds on tensor cores (bf16 caches of head dim 64 or 128; AttentionLaunch.decodeMma); default
   * QUIRE_DECODE_MMA. */
  decodeMma?: DecodeMma;
  /** Most splits of a decode row on the _mma builds; default QUIRE_DECODE_MMA_MAX_SPLITS. */
  decodeMmaMaxSplits?: number;
  /** A decode step's DeltaNet rule and gated norm in one launch; default QUIRE_DELTANET_FUSED_NORM. */
  deltanetFusedNorm?: boolean;
  /** A decode step's DeltaNet conv, rule and gated norm in one launch; default QUIRE_DELTANET_FUSED_DECODE. */
  deltanetFusedDecode?: boolean;
  /**
   * Most tokens a sequence whose DeltaNet rule runs on the coalesced build (deltanet_recurrent_wide; 0: none); default
   * QUIRE_DELTANET_WIDE_MAX_TOKENS.
   */
  deltanetWideMaxTokens?: number;
  /** A mixed step's rule in one launch (deltanet_recurrent_mixed); default QUIRE_DELTANET_ONE_LAUNCH. */
  deltanetOneLaunch?: boolean;
  /**
   * Fewest tokens of a sequence whose DeltaNet rule runs in chunks (deltanet_chunked; 0: never); default
   * QUIRE_DELTANET_CHUNKED_FROM.
   */
  deltanetChunkedFrom?: number;
  /** Tokens a chunk of the chunked DeltaNet rule (32 or 64); default QUIRE_DELTANET_CHUNK. */
  deltanetChunk?: number;
  /** The chunked DeltaNet rule's products on tensor cores; default QUIRE_DELTANET_CHUNKED_MMA. */
  deltanetChunkedMma?: boolean;
  /** Verify steps of up to this many sequences attend on the decode kernel; default QUIRE_VERIFY_DECODE_MAX_SEQS. */
  verifyDecodeMaxSeqs?: number;
  /**
   * vLLM's --kv-cache-dtype: 'fp8_e4m3' keeps K and V as FP8 E4M3 (scale 1; sm_89+): a byte an element, half the
   * bandwidth of decode attention; the kernels' _fp8 builds write and widen it. Default 'auto' (bf16).
   */
  kvCacheDtype?: KvCacheDtype;
  /** vLLM's --mamba-ssm-cache-dtype: the delta-rule states kept as 'bf16' (kernels/deltanet.cu's _sbf16 builds). */
  ssmCacheDtype?: SsmCacheDtype;
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

export class CudaBackend implements Backend {
  readonly name = 'cuda' as const;
  readonly computeDType = 'bf16' as const;
  readonly kvCacheDtype: KvCacheDtype;
  readonly kvBytesPerElement: number;
  readonly ssmCacheDtype: SsmCacheDtype;
  readonly ssmBytesPerElement: number;
  readonly device: Device;
  readonly graphs: CudaGraphs;
  readonly probes: DeviceProbes;
  readonly carry: CudaHiddenCarry;
  private readonly kv: KvMemory;
  private readonly step: StepContext;
  private readonly weights: CudaWeights;
  private readonly gemms: CudaGemms;
  private readonly attn: CudaAttention;
  /** Mixture-of-experts layers; tests set moe.variant. */
  readonly moe: CudaMoe;
  private readonly deltanet: CudaDeltaNet;
  private readonly sampling: CudaSampling;
  private readonly gpuMemoryUtilization: number;
  private readonly activationReserveBytes: number;

  constructor(opts: CudaBackendOptions = {}) {
    this.device = new Device(opts.deviceOrdinal ?? 0);
    this.kvCacheDtype = opts.kvCacheDtype ?? 'auto';
    this.kvBytesPerElement = this.kvCacheDtype === 'fp8_e4m3' ? 1 : 2;
    this.ssmCacheDtype = opts.ssmCacheDtype ?? 'f32';
    this.ssmBytesPerElement = this.ssmCacheDtype === 'bf16' ? 2 : 4;
    // first: it notes the free memory before ours
    this.kv = new KvMemory(this.device, this.kvBytesPerElement, this.ssmBytesPerElement);
    this.gpuMemoryUtilization = opts.gpuMemoryUtilization ?? 0.9;
    this.activationReserveBytes = opts.activationReserveBytes ?? 1 << 30;
    if (this.kvCacheDtype === 'fp8_e4m3' && this.device.arch < 89) {
      throw new Error(`an FP8 KV cache (--kv-cache-dtype fp8) needs compute capability 8.9 or later; ${this.device.name} is ${this.device.arch / 10}`);
    }
    const batchInvariant = opts.batchInvariant ?? false;
    const log = opts.log ?? ((text: string) => process.stderr.write(`${text}\n`));
    this.step = new StepContext(this.device, log, { initialWorkspaceBytes: opts.initialWorkspaceBytes ?? 64 << 20,
      profile: opts.profile ?? false, profileLog: opts.profileLog });
    this.weights = new CudaWeights(this.device, { batchInvariant, uploadChunkBytes: opts.uploadChunkBytes });
    this.gemms = new CudaGemms(this.step, { batchInvariant, chainGemms: opts.chainGemms, chainNorms: opts.chainNorms,
      chainShortRing: opts.chainShortRing, cublasWorkspaceBytes: opts.cublasWorkspaceBytes, gguf: opts.gguf });
    this.attn = new CudaAttention(this.step, this.kv, this.weights, this.kvCacheDtype === 'fp8_e4m3',
      { batchInvariant, fusedRope: opts.fusedRope, decodeMma: opts.decodeMma, mmaMaxSplits: opts.decodeMmaMaxSplits,
        verifyDecodeMaxSeqs: opts.verifyDecodeMaxSeqs });
    this.moe = new CudaMoe(this.step, (x, router) => this.gemms.matmul(x, router, 'router'), batchInvariant);
    this.deltanet = new CudaDeltaNet(this.step, this.kv, { fusedNorm: opts.deltanetFusedNorm,
      fusedDecode: opts.deltanetFusedDecode, wideMaxTokens: opts.deltanetWideMaxTokens,
      chunkedFrom: chunkedFromFor(batchInvariant, opts.deltanetChunkedFrom), chunk: opts.deltanetChunk,
      chunkedMma: opts.deltanetChunkedMma, oneLaunch: opts.deltanetOneLaunch });
    this.sampling = new CudaSampling(this.step);
    this.graphs = new CudaGraphs(this.step, this.kv, this.attn, this.sampling, opts.enforceEager ?? false);
    this.carry = new CudaHiddenCarry(this.step);
    this.probes = {
      reserveStepCapacity: (numTokens, numSeqs, maxBlocksPerSeq) => this.step.reserveCapacity(numTokens, numSeqs, maxBlocksPerSeq),
      settleWorkspace: () => this.settleWorkspace(),
      copyBandwidth: () => firstThatFits(COPY_BANDWIDTH_BYTES, (bytes) => measureCopyBandwidth(this.device, bytes)),
      gemmPeak: () => gemmFlops(this.device, (x, w, y, n) => this.gemms.runSquare(x, w, y, n)),
    };
  }

  // ---- weights and memory ----

  upload(t: HostTensor): Tensor {
    return this.weights.upload(t);
  }

  uploadSegments(name: string, source: WeightSource, segments: readonly ByteSegment[],
    shape: readonly number[]): Tensor {
    return this.weights.uploadSegments(name, source, segments, shape);
  }

  uploadFp8Block(name: string, parts: readonly Fp8BlockPart[]): Tensor {
    return this.weights.uploadFp8Block(name, parts);
  }

  uploadGguf(name: string, parts: readonly GgufBlocks[]): Tensor {
    return this.weights.uploadGguf(name, parts);
  }

  quantizeFp8Block(name: string, source: WeightSource, names: readonly string[]): Tensor {
    return this.weights.quantizeFp8Block(name, source, names);
  }

  /** A bf16 device tensor with `values` (tests, and host-built inputs). */
  fromHost(shape: readonly number[], values: Float32Array): CudaTensor {
    return this.weights.upload({ name: 'host', dtype: 'f32', shape: [...shape],
      data: new Uint8Array(values.buffer, values.byteOffset, values.byteLength) });
  }

  allocateKvCache(spec: KvCacheSpec): void {
    this.weights.dropUploader();
    this.kv.allocate(spec);
  }

  /** Device pointers of layer `layer`'s K and V pages. */
  kvLayer(layer: number): { k: bigint; v: bigint; spec: KvCacheSpec } {
    return this.kv.layer(layer);
  }

  /** Tests: fills the KV cache with `byte` (0xff: bf16 NaN) so a read of an unwritten slot shows. */
  fillKvCache(byte: number): void {
    this.kv.fill(byte);
  }

  /** Waits for the device and merges the activation arenas that spilled into one each (after a profile run). */
  settleWorkspace(): void {
    this.device.synchronize();
    this.step.workspace.reset();
  }

  /** Tests: fills the activation workspace with `byte` (0xff: NaN) so an unwritten output element shows. */
  fillWorkspace(byte: number): void {
    this.step.workspace.fill((p, bytes) => this.device.fillBytesAsync(p, byte, bytes));
  }

  memory(): MemoryReport {
    const reserveBytes = Math.max(0, this.activationReserveBytes - this.step.workspace.numBytes);
    return this.kv.report({ gpuMemoryUtilization: this.gpuMemoryUtilization, reserveBytes, weightBytes: this.weights.numBytes });
  }

  // ---- step ----

  beginStep(batch: ForwardBatch): StepInputs {
    if (!this.step.capturing) this.weights.dropUploader();
    this.attn.beginStep();
    return this.step.begin(batch);
  }

  /** Sizes the step metadata for the largest step the engine will run, so it never grows later. */
  reserveStepCapacity(numTokens: number, numSeqs: number, maxBlocksPerSeq: number): void {
    this.step.reserveCapacity(numTokens, numSeqs, maxBlocksPerSeq);
  }

  beginLayer(layer: number): void {
    this.step.workspace.beginLayer(layer);
  }

  endLayers(): void {
    this.step.workspace.endLayers();
  }

  // ---- ops ----

  stepTensor(shape: readonly number[]): Tensor {
    return this.step.act([...shape]);
  }

  embedding(table: Tensor, step: StepInputs, firstRow?: number): Tensor {
    return this.sampling.embedding(table, step, firstRow);
  }

  rmsNorm(x: Tensor, w: Tensor, eps: number): Tensor {
    return this.gemms.rmsNorm(x, w, eps);
  }

  addRmsNorm(x: Tensor, residual: Tensor, w: Tensor, eps: number): Tensor {
    return this.gemms.addRmsNorm(x, residual, w, eps);
  }

  matmul(x: Tensor, w: Tensor, label?: string, bias?: Tensor | null): Tensor {
    return this.gemms.matmul(x, w, label, bias);
  }

  matmulAddRmsNorm(x: Tensor, w: Tensor, label: string, bias: Tensor | null, residual: Tensor, normW: Tensor,
    eps: number): Tensor {
    return this.gemms.matmulAddRmsNorm(x, w, label, bias, residual, normW, eps);
  }

  matmulSiluMul(x: Tensor, gateUp: Tensor): Tensor {
    return this.gemms.matmulSiluMul(x, gateUp);
  }

  // x's pending norm (a chain GEMM's NormedTensor) is applied once, for the router and the experts alike
  moeExperts(x: Tensor, router: Tensor, experts: MoeExperts, route: MoeRoute): Tensor {
    return this.moe.experts(this.gemms.plain(x), router, experts, route);
  }

  moeExpertsAddRmsNorm(x: Tensor, router: Tensor, experts: MoeExperts, route: MoeRoute, residual: Tensor, normW: Tensor,
    eps: number): Tensor {
    if (!combineFusesNorm(x.shape[1]!)) return this.addRmsNorm(this.moeExperts(x, router, experts, route), residual, normW, eps);
    return this.moe.experts(this.gemms.plain(x), router, experts, route, { residual, weight: normW, eps });
  }

  siluMul(gateUp: Tensor): Tensor {
    return this.gemms.siluMul(gateUp);
  }

  qkNormRope(qkv: Tensor, qNorm: Tensor | null, kNorm: Tensor | null, eps: number, numHeads: number,
    numKvHeads: number, rope: RopeSpec, step: StepInputs, kvLayer?: number): void {
    this.attn.qkNormRope(qkv, qNorm, kNorm, eps, numHeads, numKvHeads, rope, step, kvLayer);
  }

  // ---- hybrid linear-attention models (Qwen3.5): the recurrent group's state slots and the DeltaNet ops ----

  allocateRecurrentState(layout: RecurrentStateLayout): void {
    this.weights.dropUploader();
    this.kv.allocateRecurrent(layout);
  }

  copyRecurrentState(src: number, dst: number): void {
    this.kv.copyRecurrent(src, dst);
  }

  sigmoidMul(x: Tensor, gate: Tensor): Tensor {
    return this.gemms.sigmoidMul(x, gate);
  }

  /** The gated shared expert (Qwen3-Next, Qwen3.5-MoE): test/gpu/ops.test.ts and hybrid-model.test.ts against the CPU. */
  addSigmoidGated(acc: Tensor, gate: Tensor, y: Tensor): void {
    this.gemms.addSigmoidGated(acc, gate, y);
  }

  causalConv1d(x: Tensor, w: Tensor, layer: number, step: StepInputs): Tensor {
    return this.deltanet.causalConv1d(x, w, layer, step);
  }

  gatedDeltaRule(conv: Tensor, ba: Tensor, aLog: Tensor, dtBias: Tensor, shape: DeltaNetShape, layer: number,
    step: StepInputs, gate?: DeltaNetGate): Tensor {
    return this.deltanet.gatedDeltaRule(conv, ba, aLog, dtBias, shape, layer, step, gate);
  }

  rmsNormGated(x: Tensor, z: Tensor, w: Tensor, eps: number): Tensor {
    return this.deltanet.rmsNormGated(x, z, w, eps);
  }

  concatColumns(parts: readonly Tensor[]): Tensor {
    return this.sampling.concatColumns(parts);
  }

  columns(x: Tensor, start: number, width: number): Tensor {
    return this.deltanet.columns(x, start, width);
  }

  attention(qkv: Tensor, layer: number, numHeads: number, numKvHeads: number, scale: number, step: StepInputs): Tensor {
    return this.attn.attention(qkv, layer, numHeads, numKvHeads, scale, step);
  }

  /** Grid z of the decode kernel for `numRows` (token, head) rows (CudaAttention.decodeSplits). */
  decodeSplits(numRows: number, maxRowSplits: number): number {
    return this.attn.decodeSplits(numRows, maxRowSplits);
  }

  gatherLogitRows(x: Tensor, step: StepInputs): Tensor {
    return this.sampling.gatherLogitRows(x, step);
  }

  gatherColumnParts(x: Tensor, tp: TensorParallelRank, width: number): Tensor {
    return this.sampling.gatherColumnParts(x, tp, width);
  }

  sampleTokens(logits: Tensor, step: StepInputs): Int32Array {
    return this.sampling.sampleTokens(logits, step);
  }

  sampleTokensAsync(logits: Tensor, step: StepInputs): () => Int32Array {
    return this.sampling.sampleTokensAsync(logits, step);
  }

  toHost(t: Tensor): Float32Array {
    return this.sampling.toHost(t);
  }

  toHostRows(t: Tensor, first: number, count: number): Float32Array {
    return this.sampling.toHostRows(t, first, count);
  }

  rowLogprobs(logits: Tensor, first: number, targets: Int32Array, numTop: number): Int32Array {
    return this.sampling.rowLogprobs(logits, first, targets, numTop);
  }

  /** Device-to-device copy bandwidth, bytes read + written per second. */
  copyBandwidth(): number {
    return this.probes.copyBandwidth();
  }

  /** bf16 GEMM rate of the backend's GEMM path on 8192^3, FLOP/s. */
  gemmPeak(): number {
    return this.probes.gemmPeak();
  }

  // ---- counters and graphs, as tests and profiles read them ----

  /** The last profiled step's table (profile mode). */
  get lastProfile(): NonNullable<StepContext['profiler']>['last'] | null {
    return this.step.profiler?.last ?? null;
  }

  /** graphs.run (tests call it on the backend). */
  graph<R extends Float32Array | Int32Array>(key: number, batch: ForwardBatch, record: () => R): R {
    return this.graphs.run(key, batch, record);
  }

  /** graphs.launch. */
  graphLaunch(key: number, batch: ForwardBatch): (() => Float32Array | Int32Array) | null {
    return this.graphs.launch(key, batch);
  }

  get numGraphs(): number {
    return this.graphs.size;
  }

  get numGraphCaptures(): number {
    return this.graphs.numCaptures;
  }

  get graphCaptureMs(): number {
    return this.graphs.captureMs;
  }

  get numGraphReplays(): number {
    return this.graphs.numReplays;
  }

  get numChainGemms(): number {
    return this.gemms.numChainGemms;
  }

  get numFusedRopes(): number {
    return this.attn.numFusedRopes;
  }

  dispose(): void {
    this.device.synchronize();
    this.weights.dropUploader();
    this.graphs.dispose();
    this.weights.dispose();
    this.kv.dispose();
    this.sampling.dispose();
    this.carry.dispose();
    this.moe.dispose();
    this.step.dispose();
    this.gemms.dispose();
    this.device.dispose();
  }
}
