// A decoder-only causal LM as a composition of its architecture's layers (registry.ts) over Backend ops:
//
//   embed -> per layer: norm -> mixer -> [+ residual, norm] -> feed-forward -> [+ residual, next layer's norm]
//         -> final norm -> logit rows -> lm_head
//
// With a multi-token-prediction head (LoadOptions.mtp: mtp-head.ts) every forward also keeps its final hidden states
// on the device (Backend.carry) for the head's forward after it, and the head's layer keeps its K and V in one more
// KV cache layer, after the model's own: one more attention layer in every page. An EAGLE-3 head (LoadOptions.eagle3:
// eagle3-head.ts) likewise, except that what every forward keeps is the residual stream entering three of its layers
// (three parts of the carry), as vLLM's aux_hidden_states.
//
// The residual stream lives in the embedding output; the norms add into it in place. Each layer hands the next its
// normed input (the projection and the norm fused where the backend can: layers/decoder-layer.ts).
//
// A pipeline stage (ModelConfig.pipelineStage, LoadOptions.pipeline) runs its own layers only. Its last layer ends
// as the whole model's last does, its feed-forward output not yet added (LayerOut.ffnOut), and the stage sends that
// output and the residual stream to the next stage, which begins with addRmsNorm(ffnOut, residual, its first
// layer's input norm): vLLM's hidden_states and residual, two [T, hidden] tensors. That is the op the whole model
// runs between those layers where the backend does not fuse the projection with the norm after it (the CPU backend;
// CUDA in its batch-invariant mode), so there the stages' transcripts are the whole model's, bit for bit. Only the
// last stage computes logits; the others' forward methods return empty results.

import type { Backend, DeltaNetShape, PipelineStageLink, RecurrentStateLayout, StepInputs, Tensor } from '../backend/backend.js';
import type { ForwardBatch, KvCacheSpec } from '../backend/batch.js';
import { BYTES_PER_ELEMENT } from '../loader/dtype.js';
import type { ModelConfig, WeightSource } from '../loader/types.js';
import { fp8BlockBytes } from '../backend/fp8-linear.js';
import type { DecoderLayer } from './layers/decoder-layer.js';
import type { MtpHead } from './mtp-head.js';
import type { Eagle3Head, Eagle3Input } from './eagle3-head.js';
import { loadEagle3Head } from './architectures/eagle3-weights.js';
import type { LayerStateSpec, TensorParallelRank } from './layers/types.js';
import { architectureBuilder } from './registry.js';
import { computesLogits, embedsTokens, type LoadOptions } from './load-options.js';

/** What an architecture builds: its layers and the tensors around them (a pipeline stage's: null where it has none). */
export interface ModelParts {
  embedTokens: Tensor | null;
  layers: DecoderLayer[];
  finalNorm: Tensor | null;
  /** The embedding table itself when word embeddings are tied. */
  lmHead: Tensor | null;
  /** The multi-token-prediction head, where LoadOptions.mtp asked for it. */
  mtp?: MtpHead;
  /** The EAGLE-3 head, where LoadOptions.eagle3 gave one. */
  eagle3?: Eagle3Head;
}

export class Model {
  /** The last forward's final hidden states at its logits rows (valid until the next forward begins). */
  private lastRows: Tensor | null = null;
  /** The one KV cache shape every attention layer shares (a pipeline stage of DeltaNet layers alone: the config's). */
  private readonly attentionState: Extract<LayerStateSpec, { kind: 'full_attention' }>;
  /** Layers that keep KV pages (the engine reads kvBytesPerToken every step). */
  private readonly numKvLayers: number;
  /** A hybrid model's linear-attention layers: their one state shape and their count (none: null). */
  private readonly recurrentState: { shape: DeltaNetShape; numLayers: number } | null;

  private constructor(readonly config: ModelConfig, readonly parts: ModelParts, readonly backend: Backend,
    private readonly tp: TensorParallelRank | null = null, private readonly pp: PipelineStageLink | null = null) {
    const specs = this.layerStateSpecs().filter((s) => s !== null);
    const attention = specs.filter((s) => s.kind === 'full_attention');
    const first = attention[0] ?? (pp ? { kind: 'full_attention', numKvHeads: config.numKvHeads, headDim: config.headDim } as const : null);
    if (!first || attention.some((s) => s.numKvHeads !== first.numKvHeads || s.headDim !== first.headDim)) {
      throw new Error('Model: the backends keep one KV cache shape; these layers declare none or several');
    }
    const missing = embedsTokens(config) && !parts.embedTokens ? 'embed_tokens'
      : computesLogits(config) && (!parts.finalNorm || !parts.lmHead) ? 'the final norm or lm_head' : null;
    if (missing) throw new Error(`Model: ${missing} not loaded`);
    this.attentionState = first;
    this.numKvLayers = attention.length;
    const recurrent = specs.filter((s) => s.kind === 'recurrent');
    const shape = recurrent[0]?.shape;
    if (shape && recurrent.some((s) => JSON.stringify(s.shape) !== JSON.stringify(shape))) {
      throw new Error('Model: the backends keep one recurrent state shape; these layers declare several');
    }
    this.recurrentState = shape ? { shape, numLayers: recurrent.length } : null;
  }

  static load(config: ModelConfig, weights: WeightSource, backend: Backend, opts: LoadOptions = {}): Model {
    const tp = opts.tensorParallel && opts.tensorParallel.size > 1 ? opts.tensorParallel : null;
    const stage = config.pipelineStage;
    const pp = opts.pipeline && opts.pipeline.numStages > 1 ? opts.pipeline : null;
    if ((stage !== undefined && stage.numStages > 1) !== (pp !== null) ||
      (pp && (pp.stage !== stage!.stage || pp.numStages !== stage!.numStages))) {
      throw new Error('Model.load: a pipeline stage needs its staged config and its link, of the same stage');
    }
    if ((opts.mtp || opts.eagle3) && (tp !== null || pp !== null || !backend.carry)) {
      throw new Error(`Model: an ${opts.mtp ? 'MTP' : 'EAGLE-3'} head runs on one device (no tensor or pipeline parallelism), ` +
        'on a backend that keeps hidden states');
    }
    if (opts.mtp && opts.eagle3) throw new Error('Model: one speculative head at a time (mtp or eagle3)');
    const parts = architectureBuilder(config)(config, weights, backend, opts);
    if (opts.mtp && !parts.mtp) throw new Error(`Model: ${config.architecture} has no multi-token-prediction head`);
    if (!opts.eagle3) return new Model(config, parts, backend, tp, pp);
    // the head's K and V: the KV cache layer after the target's attention layers
    const kvLayer = parts.layers.filter((l) => l.mixer.stateSpec()?.kind === 'full_attention').length;
    const eagle3 = loadEagle3Head(opts.eagle3, config, backend, kvLayer, { embedTokens: parts.embedTokens, lmHead: parts.lmHead });
    return new Model(config, { ...parts, eagle3 }, backend, tp, pp);
  }

  /** Whether this model computes logits: a whole model, or the last pipeline stage (the others return empty results). */
  get computesLogits(): boolean {
    return computesLogits(this.config);
  }

  /** The state each layer keeps per sequence (kv/ groups layers of equal specs); an MTP or EAGLE-3 head's layer last. */
  layerStateSpecs(): (LayerStateSpec | null)[] {
    const head = this.parts.mtp?.parts.layer ?? this.parts.eagle3?.parts.layer;
    const layers = head ? [...this.parts.layers, head] : this.parts.layers;
    return layers.map((l) => l.mixer.stateSpec());
  }

  /** Whether the model has an MTP head (LoadOptions.mtp). */
  get hasMtp(): boolean {
    return this.parts.mtp !== undefined;
  }

  /**
   * Allocates what an MTP head reads between forwards: the final hidden states of a step of up to `maxTokens` tokens
   * (graph padding included). Before the profile run and any graph capture: each forward keeps them.
   */
  allocateMtpCarry(maxTokens: number): void {
    if (!this.parts.mtp) throw new Error('allocateMtpCarry: the model has no MTP head');
    this.backend.carry!.allocate(maxTokens, this.config.hiddenSize);
  }

  /** Whether the model has an EAGLE-3 head (LoadOptions.eagle3). */
  get hasEagle3(): boolean {
    return this.parts.eagle3 !== undefined;
  }

  /**
   * Allocates what an EAGLE-3 head reads between forwards: the three target states of a step of up to `maxTokens`
   * tokens (graph padding included), a part each; its own output goes to part 0. Before the profile run and any graph
   * capture.
   */
  allocateEagle3Carry(maxTokens: number): void {
    if (!this.parts.eagle3) throw new Error('allocateEagle3Carry: the model has no EAGLE-3 head');
    this.backend.carry!.allocate(maxTokens, this.config.hiddenSize, 3);
  }

  /** The KV cache layout this model needs for `numBlocks` pages of `blockSize` tokens. */
  kvCacheSpec(numBlocks: number, blockSize: number): KvCacheSpec {
    const { numKvHeads, headDim } = this.attentionState;
    return { numBlocks, blockSize, numLayers: this.numKvLayers, numKvHeads, headDim };
  }

  /**
   * Copies slot src's recurrent state over slot dst's (Backend.copyRecurrentState); nothing where this model has no
   * recurrent layer (a pipeline stage of a hybrid model's attention layers alone: the other stages hold the states).
   */
  copyRecurrentState(src: number, dst: number): void {
    if (this.recurrentState !== null) this.backend.copyRecurrentState(src, dst);
  }

  /** The recurrent states of `numSlots` sequences (Backend.allocateRecurrentState), or null: no recurrent layers. */
  recurrentStateLayout(numSlots: number): RecurrentStateLayout | null {
    return this.recurrentState && { numSlots, ...this.recurrentState };
  }

  /** Bytes of KV cache one token takes (K and V, every attention layer, in the backend's dtype). */
  kvBytesPerToken(): number {
    const { numKvHeads, headDim } = this.attentionState;
    return 2 * this.numKvLayers * numKvHeads * headDim * this.backend.kvBytesPerElement;
  }

  /**
   * Bytes of weights a one-token decode step reads: every layer (of a mixture of experts, the router and the top-k
   * experts' share), the final norm and the lm head (not the embedding table); block-FP8 projections at a byte an
   * element and their scales, GGUF ones as the blocks they are kept in.
   */
  weightBytesPerStep(): number {
    const bytesPerElement = BYTES_PER_ELEMENT[this.backend.computeDType];
    const bytes = (t: Tensor | null) => !t ? 0 : t.quantized === 'fp8_block' ? fp8BlockBytes(t.shape[0]!, t.shape[1]!)
      : t.quantized === 'gguf' ? t.storedBytes! : t.shape.reduce((a, b) => a * b, 1) * bytesPerElement;
    let total = bytes(this.parts.finalNorm) + bytes(this.parts.lmHead);  // null on a stage other than the last
    for (const l of this.parts.layers) {
      for (const t of l.weightsRead()) total += t !== null && 'share' in t ? t.share * bytes(t.tensor) : bytes(t);
    }
    return total;
  }

  /** Logits [logitsIndices.length * vocabSize], row-major (a pipeline stage other than the last: none). */
  forward(batch: ForwardBatch): Float32Array {
    const out = this.logits(batch);
    return out ? this.backend.toHost(out.logits) : new Float32Array(0);
  }

  /**
   * Logits of the first `numSampled` rows to the host, and targets[i]'s prompt logprob, rank and numTop alternatives
   * under the rows after them, computed where the logits are (Backend.rowLogprobs).
   */
  forwardScored(batch: ForwardBatch, numSampled: number, targets: Int32Array, numTop: number):
    { logits: Float32Array; scored: Int32Array } {
    const b = this.backend;
    const out = this.logits(batch);
    if (!out) return { logits: new Float32Array(0), scored: new Int32Array(0) };
    const { logits } = out;
    const scored = b.rowLogprobs(logits, numSampled, targets, numTop);
    return { logits: numSampled > 0 ? b.toHostRows(logits, 0, numSampled) : new Float32Array(0), scored };
  }

  /** One token per logits row, picked by the backend as batch.sampling says (the logits stay on the device). */
  forwardTokens(batch: ForwardBatch): Int32Array {
    const out = this.logits(batch);
    return out ? this.backend.sampleTokens(out.logits, out.step) : new Int32Array(0);
  }

  /**
   * forwardTokens without waiting for the device where the backend can (sampleTokensAsync): returns what waits
   * for the ids, so the host may prepare the next step meanwhile.
   */
  forwardTokensAsync(batch: ForwardBatch): () => Int32Array {
    const out = this.logits(batch);
    if (!out) return () => new Int32Array(0);
    if (this.backend.sampleTokensAsync) return this.backend.sampleTokensAsync(out.logits, out.step);
    const ids = this.backend.sampleTokens(out.logits, out.step);
    return () => ids;
  }

  /**
   * The last forward's final hidden states (after the final norm) at logits rows `rows` (indices into its
   * logitsIndices), [rows.length * hiddenSize] f32, row after row: what an embedding pools. Call before the next
   * forward begins.
   */
  hiddenRows(rows: readonly number[]): Float32Array {
    if (this.lastRows === null) throw new Error('hiddenRows: no forward has run');
    const hidden = this.config.hiddenSize;
    const out = new Float32Array(rows.length * hidden);
    rows.forEach((r, i) => out.set(this.backend.toHostRows(this.lastRows!, r, 1), i * hidden));
    return out;
  }

  /**
   * The MTP head over `batch` (mtp-head.ts): each token's id is the token after its position, and its hidden state the
   * row batch.carryRows names of what the forward before kept (a target step's final hidden states, or the head's
   * last output); the head keeps its own output in turn. Returns the greedy token of each logits row.
   */
  mtpTokens(batch: ForwardBatch): Int32Array {
    const out = this.mtpLogitsOnDevice(batch);
    return out ? this.backend.sampleTokens(out.logits, out.step) : new Int32Array(0);
  }

  /** mtpTokens' logits rows, [logitsIndices.length * vocabSize] on the host (tests). */
  mtpLogits(batch: ForwardBatch): Float32Array {
    const out = this.mtpLogitsOnDevice(batch);
    return out ? this.backend.toHost(out.logits) : new Float32Array(0);
  }

  private mtpLogitsOnDevice(batch: ForwardBatch): { logits: Tensor; step: StepInputs } | null {
    const mtp = this.parts.mtp;
    if (!mtp) throw new Error('the model has no MTP head');
    const b = this.backend;
    const step = b.beginStep(batch);
    const out = mtp.forward(this.parts.embedTokens!, { backend: b, step, eps: this.config.rmsNormEps, tp: null });
    b.carry!.keep(out);
    if (batch.logitsIndices.length === 0) return null;
    return { logits: b.matmul(b.gatherLogitRows(out, step), this.parts.lmHead!, 'lm_head'), step };
  }

  /**
   * The EAGLE-3 head over `batch` (eagle3-head.ts): each token's id is the token after its position; its h is fc over
   * the target states carried at batch.carryRows (`input` 'target': the catch-up after a target step) or the head's
   * own last output there ('head': a chained proposal). The head keeps its output for the next chained forward.
   * Returns the greedy token of each logits row, as a target id.
   */
  eagle3Tokens(batch: ForwardBatch, input: Eagle3Input): Int32Array {
    return this.eagle3ToTargetIds(this.eagle3DraftIds(batch, input));
  }

  /**
   * eagle3Tokens before the map to target ids: the head's greedy ids in its draft vocabulary, as the forward's
   * sampleTokens returns them (what a CUDA graph of the forward records and replays; spec/mtp-proposer.ts).
   */
  eagle3DraftIds(batch: ForwardBatch, input: Eagle3Input): Int32Array {
    const out = this.eagle3LogitsOnDevice(batch, input);
    return out ? this.backend.sampleTokens(out.logits, out.step) : new Int32Array(0);
  }

  /** Draft-vocabulary ids as target ids (the head's d2t; in place). */
  eagle3ToTargetIds(ids: Int32Array): Int32Array {
    const head = this.parts.eagle3;
    if (!head) throw new Error('the model has no EAGLE-3 head');
    return head.toTargetIds(ids);
  }

  /** eagle3Tokens' logits rows over the draft vocabulary, [logitsIndices.length * draftVocab] on the host (tests). */
  eagle3Logits(batch: ForwardBatch, input: Eagle3Input): Float32Array {
    const out = this.eagle3LogitsOnDevice(batch, input);
    return out ? this.backend.toHost(out.logits) : new Float32Array(0);
  }

  private eagle3LogitsOnDevice(batch: ForwardBatch, input: Eagle3Input): { logits: Tensor; step: StepInputs } | null {
    const head = this.parts.eagle3;
    if (!head) throw new Error('the model has no EAGLE-3 head');
    const b = this.backend;
    const step = b.beginStep(batch);
    const { out, prenorm } = head.forward(input, { backend: b, step, eps: head.parts.eps, tp: null });
    b.carry!.keep(prenorm, 0);
    if (batch.logitsIndices.length === 0) return null;
    return { logits: b.matmul(b.gatherLogitRows(out, step), head.parts.lmHead, 'lm_head'), step };
  }

  /** The step's logits; null on a pipeline stage other than the last, which sends its residual stream on instead. */
  private logits(batch: ForwardBatch): { logits: Tensor; step: StepInputs } | null {
    const b = this.backend;
    const { layers, finalNorm, lmHead } = this.parts;
    const eps = this.config.rmsNormEps;
    const step = b.beginStep(batch);
    const ctx = { backend: b, step, eps, tp: this.tp };
    const vp = this.tp ? this.config.vocabParallel : undefined;
    let residual: Tensor;
    let x: Tensor | null = null;  // the next layer's normed input, where the layer before normed it
    if (this.pp && this.pp.stage > 0) {
      // the previous stage's last feed-forward output and the residual stream it is not yet added to
      const shape = [batch.numTokens, this.config.hiddenSize];
      residual = b.stepTensor(shape);
      const carried = b.stepTensor(shape);
      this.pp.recv([carried, residual]);
      x = b.addRmsNorm(carried, residual, layers[0]!.inputNorm, eps);
    } else {
      // a rank's embedding table is its part of the vocabulary (parallel/sharded-source.ts): zero rows elsewhere, summed
      residual = b.embedding(this.parts.embedTokens!, step, vp ? this.tp!.rank * vp.rows : undefined);
      if (vp) this.tp!.allReduce(residual);
    }
    let ffnOut: Tensor | null = null;
    const aux = this.parts.eagle3?.parts.auxLayers;
    for (let l = 0; l < layers.length; l++) {
      const layer = layers[l]!;
      b.beginLayer(l);
      // an EAGLE-3 head reads the residual stream entering these layers (whole here: the layer before added its
      // feed-forward output into it), each into its part of the carry
      aux?.forEach((a, part) => { if (a === l) b.carry!.keep(residual, part); });
      const input = x ?? b.rmsNorm(residual, layer.inputNorm, eps);
      const out = layer.forward(input, residual, layers[l + 1]?.inputNorm ?? null, ctx);
      x = out.next;
      ffnOut = out.ffnOut;
    }
    b.endLayers();
    if (this.pp && this.pp.stage < this.pp.numStages - 1) {
      this.pp.send([ffnOut!, residual]);
      return null;
    }
    const final = ffnOut ? b.addRmsNorm(ffnOut, residual, finalNorm!, eps) : b.rmsNorm(residual, finalNorm!, eps);
    if (this.parts.mtp) b.carry!.keep(final);
    const rows = b.gatherLogitRows(final, step);
    this.lastRows = rows;
    const logits = b.matmul(rows, lmHead!, 'lm_head');
    // so does its lm_head (or the embedding it is tied to): every rank's logits joined
    if (vp) return { logits: b.gatherColumnParts(logits, this.tp!, this.config.vocabSize), step };
    return { logits, step };
  }
}
