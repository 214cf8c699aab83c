// The one seam between the model and a device. The model (src/model) composes
// its forward pass from these ops; a backend owns every byte behind a Tensor.
//
// Activations are allocated from a per-step workspace: beginStep() resets it,
// so the same sequence of op calls on the same shapes yields the same buffers
// (what lets a CUDA backend capture a decode step as a graph and replay it).

import type { ByteSegment, DType, GgufBlocks, HostTensor, LocalExperts, WeightSource } from '../loader/types.js';
import type { ForwardBatch, KvCacheSpec } from './batch.js';
import type { KvCacheDtype } from '../loader/fp8.js';


/**
 * Steps whose sampled ids may be read late (sampleTokensAsync, graph replays): async scheduling holds one, a draft
 * model's chained proposals (engine/spec/draft-proposer.ts) up to this many less one.
 */
export const TOKEN_READS_IN_FLIGHT = 8;
export interface Tensor {
  readonly shape: readonly number[];
  /**
   * 'fp8_block' on what uploadFp8Block returns: the elements are e4m3, a byte each, with an f32 scale per 128 x 128
   * block (fp8BlockBytes), not computeDType values. What counts weight bytes reads it (Model.weightBytesPerStep), and
   * a path written for computeDType weights must decline such a layer. 'gguf' on what uploadGguf returns: llama.cpp's
   * blocks, `storedBytes` of them. Absent on every other tensor.
   */
  readonly quantized?: 'fp8_block' | 'gguf';
  /** A 'gguf' weight's bytes on the device (its parts may mix block types, so its shape does not give them). */
  readonly storedBytes?: number;
}

/**
 * One checkpoint projection stored as block FP8 (src/model/fp8-linear.ts): its e4m3 weight [n, K] (dtype
 * 'f8_e4m3') and `weight_scale_inv` [ceil(n / 128), ceil(K / 128)] f32.
 */
export interface Fp8BlockPart {
  weight: HostTensor;
  scaleInv: HostTensor;
}

/**
 * One layer's experts, stacked so that expert e's weights sit at a fixed stride: gateUp [E * 2I, H], expert e's gate
 * rows then its up rows at rows e * 2I..; down [E * H, I], expert e's at rows e * H... Both of the compute dtype or
 * both block FP8 (uploadFp8Block's, 2I, H and I multiples of 128 so each expert's scale blocks are its own).
 */
export interface MoeExperts {
  /** The router's experts (its rows): every rank routes over all of them. */
  numExperts: number;
  /** Each expert's MLP width I (moe_intermediate_size). */
  intermediate: number;
  gateUp: Tensor;
  down: Tensor;
  /**
   * Expert parallelism (vLLM's --enable-expert-parallel): gateUp and down stack only these local.count experts, in
   * local slot order; a token's chosen experts that this rank does not hold add nothing to its row here (the ranks'
   * outputs are summed by the all-reduce after the layer). The routing (softmax, top-k, renormalization) is still
   * over all numExperts. Absent: all numExperts, slot e the expert e.
   */
  local?: LocalExperts;
}

/** How a router's logits pick experts. */
export interface MoeRoute {
  topK: number;
  /** Divide the top-k probabilities by their sum (Qwen3-MoE's norm_topk_prob; always for Mixtral). */
  renormalize: boolean;
}

export interface RopeSpec {
  headDim: number;
  /**
   * [rotaryDim / 2] inverse frequencies, already scaled (llama3 scaling applied by the model). The rotation covers
   * each head's first rotaryDim = 2 * invFreq.length channels (neox half-split within them); the rest pass through
   * (partial rotary, Qwen3.5's 64 of 256). Most models rotate the whole head: invFreq.length = headDim / 2.
   */
  invFreq: Float32Array;
}

/** A gated DeltaNet layer's sizes: q and k heads of keyDim (a k head serves numValueHeads / numKeyHeads v heads). */
export interface DeltaNetShape {
  numKeyHeads: number;
  numValueHeads: number;
  keyDim: number;
  valueDim: number;
  /** Causal depthwise conv1d width over the channels q | k | v (2 numKeyHeads keyDim + numValueHeads valueDim). */
  convKernel: number;
}

/** The gated RMSNorm after a DeltaNet layer's rule (Backend.gatedDeltaRule's gate; rmsNormGated's arguments). */
export interface DeltaNetGate {
  z: Tensor;
  w: Tensor;
  eps: number;
}

/** Channels of a DeltaNet layer's causal conv1d: q | k | v. */
export function convChannels(s: DeltaNetShape): number {
  return 2 * s.numKeyHeads * s.keyDim + s.numValueHeads * s.valueDim;
}

/** The delta-rule state's dtype between steps (Backend.ssmCacheDtype). */
export type SsmCacheDtype = 'f32' | 'bf16';

/**
 * The per-sequence recurrent state of `numLayers` equal gated DeltaNet layers, in `numSlots` slots (a slot a
 * running sequence: ForwardBatch.stateSlots): each layer's conv window (the last convKernel - 1 inputs of its
 * channels, f32) and delta-rule state (numValueHeads x keyDim x valueDim, of the backend's ssmCacheDtype).
 */
export interface RecurrentStateLayout {
  numSlots: number;
  numLayers: number;
  shape: DeltaNetShape;
}

/**
 * A rank's share of tensor parallelism, on this backend's tensors: every sublayer's output is then a partial sum (its
 * last projection row-parallel: attention's o, the MLP's down, the experts' down), which allReduce sums over the
 * ranks in place before the residual add (model/layers/decoder-layer.ts; parallel/tp-rank.ts makes one).
 */
export interface TensorParallelRank {
  rank: number;
  size: number;
  allReduce(x: Tensor): void;
  /** recv = every rank's send, stacked in rank order (recv holds size x send's elements). */
  allGather(send: Tensor, recv: Tensor): void;
}

/**
 * A pipeline stage's link to its neighbours (parallel/pp-rank.ts makes one), on this backend's tensors: the residual
 * stream leaves a stage through send and enters the next through recv, in the order the stages send them (every
 * stage runs the same steps in the same order). A send returns once it is enqueued (CUDA: on the backend's stream)
 * or handed over (CPU); a recv, once the tensors hold what the previous stage sent (CUDA: on the stream).
 */
export interface PipelineStageLink {
  stage: number;
  numStages: number;
  /** Sends the tensors, in order, to the next stage (not on the last). */
  send(tensors: readonly Tensor[]): void;
  /** Fills the tensors, in order, with what the previous stage sent (not on the first); shapes as it sent them. */
  recv(tensors: readonly Tensor[]): void;
}

/** Batch metadata after it has been placed where the ops can read it. */
export interface StepInputs {
  readonly batch: ForwardBatch;
}

/** CUDA graphs of decode steps, where a backend has them; the model runner decides which steps use them. */
export interface DeviceGraphs {
  /**
   * Runs `record` (a forward over `batch` that calls beginStep and ends in one toHost or sampleTokens) through the
   * graph cached under `key`: the first call for a key runs eagerly, then captures; later calls replay. Steps other
   * than decode-only ones (or with graphs off) just run `record`.
   */
  run<R extends Float32Array | Int32Array>(key: number, batch: ForwardBatch, record: () => R): R;
  /** Launches the graph under `key` without waiting; returns what waits for its result, or null where none is ready. */
  launch(key: number, batch: ForwardBatch): (() => Float32Array | Int32Array) | null;
  readonly numCaptures: number;
  /** Wall time of the steps that captured a graph. */
  readonly captureMs: number;
}

/**
 * Hidden states one forward leaves for a later one: multi-token prediction (model/mtp-head.ts) reads a target step's
 * final hidden states in the forward of the proposer after it, and each of its own forwards' outputs in the next one;
 * an EAGLE-3 head (model/eagle3-head.ts) reads three of the target's layers' inputs, one part each. One buffer of
 * `parts` x `rows` x `width` computeDType values that outlives steps, part after part: a part is kept and read whole
 * rows at a time, so every copy is a contiguous one (no strided copy, no kernel of its own). What a keep() wrote stays
 * until the next keep() of that part.
 */
export interface HiddenCarry {
  /** Allocates the buffer (before any graph is captured: a graph names its address); `parts` defaults to 1. */
  allocate(rows: number, width: number, parts?: number): void;
  /** Copies x [T, width] into rows 0 .. T - 1 of part `part` (default 0), after the work launched before it. */
  keep(x: Tensor, part?: number): void;
  /** [numTokens, width]: part `part`'s (default 0) rows at step.batch.carryRows, as they were before this step's keep(). */
  rows(step: StepInputs, part?: number): Tensor;
}

/** What the model runner's start-up profile run and the benchmarks' rooflines need of a device backend. */
export interface DeviceProbes {
  /** Sizes the step metadata for the largest step the engine will run, so it never grows under a captured graph. */
  reserveStepCapacity(numTokens: number, numSeqs: number, maxBlocksPerSeq: number): void;
  /** Waits for the device and merges the activation arenas a profile run spilled into. */
  settleWorkspace(): void;
  /** Device-to-device copy bandwidth, bytes read + written per second. */
  copyBandwidth(): number;
  /** bf16 GEMM FLOP/s on 8192^3. */
  gemmPeak(): number;
}

export interface MemoryReport {
  /** Bytes the backend may give to the KV cache right now. */
  availableKvBytes: number;
  /**
   * CUDA: what the KV cache could take of the memory free now, whatever --gpu-memory-utilization says (less the
   * activation reserve): the cap of an explicit --kv-cache-memory-bytes, which replaces the fraction as in vLLM.
   */
  freeKvBytes?: number;
  totalBytes: number;
  weightBytes: number;
}

export interface Backend {
  readonly name: 'cpu' | 'cuda';
  /** Element type activations and weights are kept in on this backend. */
  readonly computeDType: DType;
  /** The KV cache's elements: the compute dtype ('auto'), or FP8 E4M3 (vLLM's --kv-cache-dtype fp8). */
  readonly kvCacheDtype: KvCacheDtype;
  /** Bytes a KV cache element takes here. */
  readonly kvBytesPerElement: number;
  /**
   * A gated DeltaNet layer's delta-rule state between steps: f32, or bf16 (vLLM's --mamba-ssm-cache-dtype: rounded to
   * bf16 at the end of each step, the rule itself in f32). The conv windows stay f32.
   */
  readonly ssmCacheDtype: SsmCacheDtype;
  /** Bytes a delta-rule state element takes here (the CPU backend keeps f32 and rounds the values). */
  readonly ssmBytesPerElement: number;

  /** Uploads a weight (any checkpoint dtype) and converts it to computeDType. */
  upload(t: HostTensor): Tensor;
  /**
   * Optional fast path for loading: uploads the concatenation of `segments` (byte ranges of checkpoint tensors of the
   * compute dtype, planned by src/model/architectures/weight-parts.ts) read from `source` by readInto, with no host
   * copy of the whole, as a tensor of `shape`.
   */
  uploadSegments?(name: string, source: WeightSource, segments: readonly ByteSegment[],
    shape: readonly number[]): Tensor;
  /**
   * Uploads a block-FP8 linear weight: the rows of `parts` concatenated (each part's rows a multiple of 128, so
   * its scale blocks stay whole), kept as FP8 with its block scales. matmul() on the returned tensor computes
   * fp8BlockMatmul (src/model/fp8-linear.ts): activations quantized per token and 128 columns, as vLLM's W8A8.
   * The returned tensor's shape is [sum of the parts' rows, K] and its `quantized` is 'fp8_block'. The loader
   * refuses biases on FP8 projections, so matmul with a bias on one may throw.
   */
  uploadFp8Block?(name: string, parts: readonly Fp8BlockPart[]): Tensor;
  /**
   * Optional: a GGUF projection kept as llama.cpp's blocks, the rows of `parts` concatenated (parts of one K; their
   * block types may differ). matmul() on the returned tensor ([sum of the parts' rows, K], `quantized` 'gguf') equals
   * matmul on the parts dequantized (gguf-quants.ts) within bf16 rounding; no other op takes it. Without it (the CPU
   * backend, the reference) the loader uploads the dequantized values.
   */
  uploadGguf?(name: string, parts: readonly GgufBlocks[]): Tensor;
  /**
   * Optional (--quantization fp8): the row-concatenation of `names` (checkpoint tensors of a float dtype, each part's
   * rows and columns multiples of 128) quantized to block FP8 where the weights live, as quantizeWeightBlocks
   * (src/model/fp8-linear.ts) quantizes the bf16 values, and kept as uploadFp8Block keeps a checkpoint's. Without it
   * the loader quantizes on the host and calls uploadFp8Block.
   */
  quantizeFp8Block?(name: string, source: WeightSource, names: readonly string[]): Tensor;
  /** Allocates the paged KV cache: K and V per layer, [numBlocks, blockSize, numKvHeads, headDim]. */
  allocateKvCache(spec: KvCacheSpec): void;
  /** Allocates (zeroed) the recurrent states of a hybrid model's linear-attention layers. */
  allocateRecurrentState(layout: RecurrentStateLayout): void;
  /**
   * Copies slot `src`'s recurrent state (every layer's conv window and delta-rule state) over slot `dst`, after the
   * work already launched and before any launched later: prefix caching saves a state at a page end and restores it
   * into a hit request's slot.
   */
  copyRecurrentState(src: number, dst: number): void;
  memory(): MemoryReport;

  /** Resets the activation workspace and stages the step's metadata. */
  beginStep(batch: ForwardBatch): StepInputs;

  /**
   * Activations made after beginLayer(l) may be reused once layer l + 2 begins
   * (only the residual and the previous layer's outputs live across layers);
   * endLayers() returns to step-lifetime activations.
   */
  beginLayer(layer: number): void;
  endLayers(): void;
  /**
   * An activation of the compute dtype whose elements are not set: what a later pipeline stage receives the residual
   * stream into (PipelineStageLink.recv). Its lifetime is any activation's made where it is (beginLayer).
   */
  stepTensor(shape: readonly number[]): Tensor;
  /** out[t] = table[inputIds[t]]  -> [numTokens, hidden]; a negative id -(r + 1) is the last sampleTokens' row r. */
  /**
   * The step's input ids' rows of the table. `firstRow`: the table is a tensor-parallel rank's rows [firstRow,
   * firstRow + its rows) of the vocabulary, and an id outside them gives a zero row (summed over the ranks after).
   */
  embedding(table: Tensor, step: StepInputs, firstRow?: number): Tensor;
  /** out = rmsnorm(x) * w */
  rmsNorm(x: Tensor, w: Tensor, eps: number): Tensor;
  /** residual += x (in place); returns rmsnorm(residual) * w. */
  addRmsNorm(x: Tensor, residual: Tensor, w: Tensor, eps: number): Tensor;
  /**
   * Optional: addRmsNorm(matmul(x, w, label, bias), residual, normW, eps), the residual's bits the same. The result
   * may be an input only matmul and matmulSiluMul take, the norm's scale left to them (the CUDA chain GEMMs): their
   * outputs then match the unfused ops' within bf16 rounding, not bit for bit.
   */
  matmulAddRmsNorm?(x: Tensor, w: Tensor, label: string, bias: Tensor | null, residual: Tensor, normW: Tensor,
    eps: number): Tensor;
  /**
   * y[T, N] = x[T, K] * w[N, K]^T (+ bias[N], added to the sums before they are rounded); `label` names the
   * projection in profiles ('qkv', 'o', 'gate_up', 'down', 'lm_head').
   */
  matmul(x: Tensor, w: Tensor, label?: string, bias?: Tensor | null): Tensor;
  /**
   * In place on qkv [T, (numHeads + 2*numKvHeads) * headDim]: optional per-head
   * RMSNorm of q and k (Qwen3), then rotary embedding (neox, half-split) of q and k.
   * With `kvLayer`, a backend may also write this step's k and v into that layer of the
   * cache here (one pass fewer); attention() on that layer then skips its own write.
   */
  qkNormRope(qkv: Tensor, qNorm: Tensor | null, kNorm: Tensor | null, eps: number,
    numHeads: number, numKvHeads: number, rope: RopeSpec, step: StepInputs, kvLayer?: number): void;
  /**
   * Writes this step's k, v (from qkv) into layer `layer` of the cache at the slot
   * mapping, then returns causal GQA attention output [T, numHeads * headDim].
   */
  attention(qkv: Tensor, layer: number, numHeads: number, numKvHeads: number,
    scale: number, step: StepInputs): Tensor;
  /** x * sigmoid(gate), elementwise, both [T, N] (output-gated attention: Qwen3.5, Qwen3-Next). */
  sigmoidMul(x: Tensor, gate: Tensor): Tensor;
  /**
   * Causal depthwise conv1d and silu over x [T, C] (a DeltaNet layer's q | k | v channels), w [C, K]: per
   * sequence, out[t, c] = silu(sum_j w[c, j] * x[t - K + 1 + j, c]), the inputs before the step's first token read
   * from the sequence's conv window in recurrent layer `layer` (zeros where its chunk starts at position 0), and
   * the window updated to its last K - 1 inputs.
   */
  causalConv1d(x: Tensor, w: Tensor, layer: number, step: StepInputs): Tensor;
  /**
   * The gated delta rule over conv [T, C] (q | k | v after causalConv1d) and ba [T, 2 Hv] (per v head: b, then
   * a, the in_proj_b and in_proj_a outputs), token by token per sequence on its state S [Hv, Dk, Dv] in recurrent
   * layer `layer` (zeros where its chunk starts at position 0): q, k l2-normalised (eps 1e-6), q / sqrt(Dk);
   * g = -exp(aLog[h]) softplus(a + dtBias[h]), beta = sigmoid(b); S = exp(g) S; S += k (beta (v - S^T k))^T;
   * out = S^T q -> [T, Hv Dv]. transformers' torch_recurrent_gated_delta_rule, the exact reference of its chunked form.
   * With `gate`: rmsNormGated(out, gate.z, gate.w, gate.eps), bit for bit, which a backend may compute in the same
   * launch (CUDA: decode steps, QUIRE_DELTANET_FUSED_NORM).
   */
  gatedDeltaRule(conv: Tensor, ba: Tensor, aLog: Tensor, dtBias: Tensor, shape: DeltaNetShape, layer: number,
    step: StepInputs, gate?: DeltaNetGate): Tensor;
  /**
   * [T, sum of the parts' widths]: the parts [T, W] (all of one width), side by side, part 0's columns first (torch.cat
   * on the last dim). An EAGLE-3 head's inputs: its fc over three carried hidden states, its q, k and v over the normed
   * embedding and hidden state (model/eagle3-head.ts).
   */
  concatColumns(parts: readonly Tensor[]): Tensor;
  /**
   * Columns [start, start + width) of x [T, N] as a [T, width] tensor: one GEMM's output split among its consumers
   * (a DeltaNet layer's qkv | z | b | a). On CUDA a view with x's row stride, which only causalConv1d's x,
   * gatedDeltaRule's ba and rmsNormGated's z accept (any other op refuses it); on the CPU a copy.
   */
  columns(x: Tensor, start: number, width: number): Tensor;
  /** Per group of w.length channels of x and z [T, N]: rmsnorm(x) * w * silu(z) (transformers' RMSNormGated). */
  rmsNormGated(x: Tensor, z: Tensor, w: Tensor, eps: number): Tensor;
  /** gateUp [T, 2I] (gate first, then up) -> silu(gate) * up [T, I] */
  siluMul(gateUp: Tensor): Tensor;
  /** siluMul(matmul(x, gateUp)), bit for bit; a backend may run it as one kernel. */
  matmulSiluMul(x: Tensor, gateUp: Tensor): Tensor;
  /**
   * A mixture-of-experts feed-forward (vLLM's fused_moe), on x [T, H] and the router's weight [E, H]: the router's
   * logits matmul(x, router) (bf16, as matmul rounds them; a backend may compute them in its own kernel, within bf16
   * rounding of its matmul's, and in the batch-invariant mode with its matmul's bits); per token, softmax over the E
   * logits in f32, the route.topK largest probabilities (ties to the lower expert),
   * divided by their sum where route.renormalize; then out[t] = sum_j p_j * down_e(silu(gate_e x_t) * up_e x_t)
   * over the chosen experts e = e_j, in j order -> [T, H]; with experts.local, over those of the chosen experts this
   * rank holds (the others add nothing). A row's result depends on its own x and logits only: never on which other
   * rows chose the same experts.
   */
  moeExperts(x: Tensor, router: Tensor, experts: MoeExperts, route: MoeRoute): Tensor;
  /**
   * acc[t, :] += sigmoid(gate[t]) * y[t, :], in place, for acc and y [T, N] and gate [T, 1]: a shared expert's output
   * y, scaled per token by the sigmoid of its gate's logit (matmul(x, shared_expert_gate)), added to the routed
   * experts' sum acc (transformers' Qwen2MoeSparseMoeBlock, as Qwen3-Next and Qwen3.5-MoE use it). f32: the gate
   * and each product rounded once, then the sum.
   */
  addSigmoidGated(acc: Tensor, gate: Tensor, y: Tensor): void;
  /**
   * Optional: addRmsNorm(moeExperts(x, router, experts, route), residual, normW, eps) bit for bit, residual included
   * (the CUDA backend: the combine, the residual add and the norm in one kernel).
   */
  moeExpertsAddRmsNorm?(x: Tensor, router: Tensor, experts: MoeExperts, route: MoeRoute, residual: Tensor,
    normW: Tensor, eps: number): Tensor;
  /** Rows of x at the step's logitsIndices -> [numLogits, hidden] */
  gatherLogitRows(x: Tensor, step: StepInputs): Tensor;
  /**
   * Tensor parallelism's vocabulary-parallel logits: x [R, W] is this rank's columns (its rows of the vocabulary);
   * every rank's are gathered (tp.allGather) and joined in rank order into [R, width], the columns past width (the
   * padding of the vocabulary to a multiple of the ranks) dropped.
   */
  gatherColumnParts(x: Tensor, tp: TensorParallelRank, width: number): Tensor;
  /**
   * One token per row of logits [numLogits, vocab] as the step's batch.sampling
   * says (greedy where absent); only the token ids reach the host.
   */
  sampleTokens(logits: Tensor, step: StepInputs): Int32Array;
  /**
   * Optional: sampleTokens without waiting for the device; the returned function waits and gives the ids. It must
   * be called before TOKEN_READS_IN_FLIGHT - 1 more steps have begun (the host slots the ids are copied into are
   * reused by turns; a graph replay's ids take the same turns).
   */
  sampleTokensAsync?(logits: Tensor, step: StepInputs): () => Int32Array;
  /** Copies a tensor to the host as f32. */
  toHost(t: Tensor): Float32Array;
  /**
   * Prompt logprobs where the logits are: for each i, token targets[i] under logits row first + i, as
   * rowLogprobsReference (src/backend/sampling/reference.ts) packs them: 2 + 2 numTop int32 a row.
   */
  rowLogprobs(logits: Tensor, first: number, targets: Int32Array, numTop: number): Int32Array;
  /** Rows [first, first + count) of a [rows, n] tensor to the host as f32. */
  toHostRows(t: Tensor, first: number, count: number): Float32Array;
  /** CUDA graphs of decode steps; absent: every step runs eagerly. */
  readonly graphs?: DeviceGraphs;
  /** Hidden states kept between forwards (an MTP or EAGLE-3 head); absent: the backend cannot run one. */
  readonly carry?: HiddenCarry;
  /** Start-up sizing and roofline probes; absent on the CPU backend. */
  readonly probes?: DeviceProbes;
  /** Frees everything. */
  dispose(): void;
}
