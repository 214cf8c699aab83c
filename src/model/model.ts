// The decoder-only transformer (Qwen3, Qwen2, Llama, Mistral, Phi-3) as a composition of Backend ops:
//
//   embed -> per layer: [add]RMSNorm -> qkv [+ bias] -> qkNorm+RoPE -> paged attention -> o [+ bias]
//                       -> addRMSNorm -> gate_up -> silu*up -> down
//         -> addRMSNorm(final) -> logit rows -> lm_head
//
// The residual stream lives in the embedding output; addRmsNorm adds into it in place.

import type { Backend, RopeSpec, StepInputs, Tensor } from '../backend/backend.js';
import { BYTES_PER_ELEMENT } from '../loader/dtype.js';
import type { ModelConfig, WeightSource } from '../loader/types.js';
import type { ForwardBatch, KvCacheSpec } from '../backend/batch.js';
import { fp8BlockBytes } from '../backend/fp8-linear.js';
import { ropeAttentionFactor, ropeInvFreq } from './rope.js';
import { loadWeights, type LoadOptions, type ModelWeights } from './weights.js';

export class Model {
  private readonly rope: RopeSpec;
  private readonly scale: number;
  /** The last forward's final hidden states at its logits rows (valid until the next forward begins). */
  private lastRows: Tensor | null = null;

  private constructor(
    readonly config: ModelConfig,
    readonly weights: ModelWeights,
    readonly backend: Backend,
  ) {
    this.rope = { headDim: config.headDim, invFreq: ropeInvFreq(config) };
    // YaRN scales the rotated q and k by its attention factor: the scores by its square, folded in here
    this.scale = ropeAttentionFactor(config) ** 2 / Math.sqrt(config.headDim);
  }

  static load(config: ModelConfig, weights: WeightSource, backend: Backend, opts: LoadOptions = {}): Model {
    return new Model(config, loadWeights(config, weights, backend, opts), backend);
  }

  /** The KV cache layout this model needs for `numBlocks` pages of `blockSize` tokens. */
  kvCacheSpec(numBlocks: number, blockSize: number): KvCacheSpec {
    const c = this.config;
    return { numBlocks, blockSize, numLayers: c.numLayers, numKvHeads: c.numKvHeads, headDim: c.headDim };
  }

  /** Bytes of KV cache one token takes (K and V, every layer, in the backend's dtype). */
  kvBytesPerToken(): number {
    const c = this.config;
    return 2 * c.numLayers * c.numKvHeads * c.headDim * this.backend.kvBytesPerElement;
  }

  /**
   * Bytes of weights a decode step reads: every layer, the final norm and the lm head (not the embedding table);
   * block-FP8 projections at a byte an element and their scales.
   */
  weightBytesPerStep(): number {
    const w = this.weights;
    const bytesPerElement = BYTES_PER_ELEMENT[this.backend.computeDType];
    const bytes = (t: Tensor | null) => !t ? 0 : t.quantized === 'fp8_block' ? fp8BlockBytes(t.shape[0]!, t.shape[1]!)
      : t.shape.reduce((a, b) => a * b, 1) * bytesPerElement;
    let total = bytes(w.finalNorm) + bytes(w.lmHead);
    for (const l of w.layers) {
      total += bytes(l.inputNorm) + bytes(l.qkv) + bytes(l.qNorm) + bytes(l.kNorm) + bytes(l.o) +
        bytes(l.postAttentionNorm) + bytes(l.gateUp) + bytes(l.down);
    }
    return total;
  }

  /** Logits [logitsIndices.length * vocabSize], row-major. */
  forward(batch: ForwardBatch): Float32Array {
    return this.backend.toHost(this.logits(batch).logits);
  }

  /**
   * Logits of the first `numSampled` rows to the host, and targets[i]'s prompt logprob, rank and numTop alternatives
   * under the rows after them, computed where the logits are (Backend.rowLogprobs).
   */
  forwardScored(batch: ForwardBatch, numSampled: number, targets: Int32Array, numTop: number):
    { logits: Float32Array; scored: Int32Array } {
    const b = this.backend;
    const { logits } = this.logits(batch);
    const scored = b.rowLogprobs(logits, numSampled, targets, numTop);
    return { logits: numSampled > 0 ? b.toHostRows(logits, 0, numSampled) : new Float32Array(0), scored };
  }

  /** One token per logits row, picked by the backend as batch.sampling says (the logits stay on the device). */
  forwardTokens(batch: ForwardBatch): Int32Array {
    const { logits, step } = this.logits(batch);
    return this.backend.sampleTokens(logits, step);
  }

  /**
   * forwardTokens without waiting for the device where the backend can (sampleTokensAsync): returns what waits
   * for the ids, so the host may prepare the next step meanwhile.
   */
  forwardTokensAsync(batch: ForwardBatch): () => Int32Array {
    const { logits, step } = this.logits(batch);
    if (this.backend.sampleTokensAsync) return this.backend.sampleTokensAsync(logits, step);
    const ids = this.backend.sampleTokens(logits, step);
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

  private logits(batch: ForwardBatch): { logits: Tensor; step: StepInputs } {
    const b = this.backend;
    const c = this.config;
    const w = this.weights;
    const eps = c.rmsNormEps;
    const step = b.beginStep(batch);
    let residual = b.embedding(w.embedTokens, step);
    let mlpOut: Tensor | null = null;
    // a GEMM and the norm after it, as one op where the backend has it (matmulAddRmsNorm)
    const matmulNorm = (x: Tensor, weight: Tensor, label: string, bias: Tensor | null, norm: Tensor): Tensor =>
      b.matmulAddRmsNorm ? b.matmulAddRmsNorm(x, weight, label, bias, residual, norm, eps)
        : b.addRmsNorm(b.matmul(x, weight, label, bias), residual, norm, eps);
    let next: Tensor | null = null;  // the next layer's input, where the last down normed it
    for (let l = 0; l < c.numLayers; l++) {
      const lw = w.layers[l]!;
      b.beginLayer(l);
      const x = next ?? (mlpOut ? b.addRmsNorm(mlpOut, residual, lw.inputNorm, eps) : b.rmsNorm(residual, lw.inputNorm, eps));
      const qkv = b.matmul(x, lw.qkv, 'qkv', lw.qkvBias);
      b.qkNormRope(qkv, lw.qNorm, lw.kNorm, eps, c.numHeads, c.numKvHeads, this.rope, step, l);
      const attn = b.attention(qkv, l, c.numHeads, c.numKvHeads, this.scale, step);
      const h = matmulNorm(attn, lw.o, 'o', lw.oBias, lw.postAttentionNorm);
      const act = b.matmulSiluMul(h, lw.gateUp);
      const following = w.layers[l + 1];
      if (following) next = matmulNorm(act, lw.down, 'down', null, following.inputNorm);
      else mlpOut = b.matmul(act, lw.down, 'down');
    }
    b.endLayers();
    const final = mlpOut ? b.addRmsNorm(mlpOut, residual, w.finalNorm, eps) : b.rmsNorm(residual, w.finalNorm, eps);
    const rows = b.gatherLogitRows(final, step);
    this.lastRows = rows;
    return { logits: b.matmul(rows, w.lmHead, 'lm_head'), step };
  }
}
