// The multi-token-prediction head of a Qwen3.5 / Qwen3.6 or Qwen3-Next checkpoint (mtp.*, beside the text model's
// tensors, whatever the text model's own prefix), as vLLM's Qwen3_5MultiTokenPredictor and
// Qwen3NextMultiTokenPredictor read it:
//   mtp.pre_fc_norm_embedding.weight, mtp.pre_fc_norm_hidden.weight [hidden]   (1 + w) RMSNorms of its two inputs
//   mtp.fc.weight [hidden, 2 hidden]   its first hidden columns take the normed embedding, the others the normed
//                                      hidden state (vLLM concatenates embedding, then hidden)
//   mtp.layers.0.*                     one full-attention decoder layer, named as the text model's are
//                                      (input_layernorm, self_attn.*, post_attention_layernorm, mlp.*); its MLP dense
//                                      or the experts, as the checkpoint has it (Qwen3.5's dense, Qwen3.5-MoE's and
//                                      Qwen3-Next's sparse, in the checkpoint's expert layout)
//   mtp.norm.weight [hidden]           the final (1 + w) RMSNorm
// The embedding table and the lm_head are the target's. fc is split by columns at load, so the head needs no concat
// op: fc x = fc_e e + fc_h h (model/mtp-head.ts).

import type { Backend, Tensor } from '../../backend/backend.js';
import type { HostTensor, ModelConfig, WeightSource } from '../../loader/types.js';
import type { ExpectedTensor } from './dense-weights.js';
import { validateWeights } from './dense-weights.js';
import { addFeedForwardTensors, loadFeedForward, type ExpertLayout, type HybridFeedForwardWeights } from './hybrid-moe-weights.js';
import { addAttentionTensors, loadAttention, onePlus, type Qwen35AttentionWeights } from './qwen3_5-weights.js';

export const MTP_PREFIX = 'mtp.';
const LAYER = `${MTP_PREFIX}layers.0.`;

export type MtpHeadWeights = {
  preFcNormEmbedding: Tensor;
  preFcNormHidden: Tensor;
  /** [hidden, hidden]: fc's columns that take the normed embedding. */
  fcEmbedding: Tensor;
  /** [hidden, hidden]: fc's columns that take the normed hidden state. */
  fcHidden: Tensor;
  inputNorm: Tensor;
  postAttentionNorm: Tensor;
  attention: Qwen35AttentionWeights;
  norm: Tensor;
} & HybridFeedForwardWeights;

/**
 * Whether the head's layer has the experts: as the checkpoint stores it where there is one (its router,
 * mtp.layers.0.mlp.gate.weight), else as vLLM builds it (a sparse layer in a mixture-of-experts family, as its layer 0).
 */
export function mtpLayerIsSparse(c: ModelConfig, source: Pick<WeightSource, 'has'> | null): boolean {
  if (c.moe === null) return false;
  return source === null ? c.moe.sparseLayers[0] ?? false : source.has(`${LAYER}mlp.gate.weight`);
}

/** The head's experts as the checkpoint stores them (fused where it has mtp.layers.0.mlp.experts.gate_up_proj). */
function mtpExpertLayout(c: ModelConfig, source: Pick<WeightSource, 'has'> | null): ExpertLayout {
  if (source === null) return c.architecture === 'qwen3_5_moe' ? 'fused' : 'per-expert';
  return source.has(`${LAYER}mlp.experts.gate_up_proj`) ? 'fused' : 'per-expert';
}

/** The head's checkpoint tensors, with their shapes and dtype (`source`: the checkpoint, where the layout is read). */
export function mtpExpectedTensors(c: ModelConfig, source: Pick<WeightSource, 'has'> | null = null): ExpectedTensor[] {
  const H = c.hiddenSize;
  const out: ExpectedTensor[] = [];
  const add = (name: string, shape: number[]): void => void out.push({ name, shape, dtype: c.dtype });
  add(`${MTP_PREFIX}fc.weight`, [H, 2 * H]);
  add(`${MTP_PREFIX}pre_fc_norm_embedding.weight`, [H]);
  add(`${MTP_PREFIX}pre_fc_norm_hidden.weight`, [H]);
  add(`${LAYER}input_layernorm.weight`, [H]);
  addAttentionTensors(c, LAYER, add);
  add(`${LAYER}post_attention_layernorm.weight`, [H]);
  addFeedForwardTensors(c, mtpLayerIsSparse(c, source), LAYER, mtpExpertLayout(c, source), add);
  add(`${MTP_PREFIX}norm.weight`, [H]);
  return out;
}

/** fc's columns [from, from + width) as a [rows, width] tensor of its dtype. */
function columns(t: HostTensor, from: number, width: number, name: string): HostTensor {
  const [numRows, numCols] = [t.shape[0]!, t.shape[1]!];
  const bytes = t.data.byteLength / (numRows * numCols);
  const data = new Uint8Array(numRows * width * bytes);
  for (let r = 0; r < numRows; r++) data.set(t.data.subarray((r * numCols + from) * bytes, (r * numCols + from + width) * bytes), r * width * bytes);
  return { name, dtype: t.dtype, shape: [numRows, width], data };
}

/** Loads the head (after validating its tensors: a checkpoint without one fails naming the first it lacks). */
export function loadMtpHeadWeights(c: ModelConfig, source: WeightSource, backend: Backend): MtpHeadWeights {
  validateWeights(c, source, mtpExpectedTensors(c, source));
  const read = (n: string): HostTensor => source.read(n);
  const norm = (n: string): Tensor => backend.upload(onePlus(read(n)));
  const H = c.hiddenSize;
  const fc = read(`${MTP_PREFIX}fc.weight`);
  return {
    preFcNormEmbedding: norm(`${MTP_PREFIX}pre_fc_norm_embedding.weight`),
    preFcNormHidden: norm(`${MTP_PREFIX}pre_fc_norm_hidden.weight`),
    fcEmbedding: backend.upload(columns(fc, 0, H, `${MTP_PREFIX}fc.embedding`)),
    fcHidden: backend.upload(columns(fc, H, H, `${MTP_PREFIX}fc.hidden`)),
    inputNorm: norm(`${LAYER}input_layernorm.weight`),
    postAttentionNorm: norm(`${LAYER}post_attention_layernorm.weight`),
    attention: loadAttention(c, LAYER, source, backend),
    norm: norm(`${MTP_PREFIX}norm.weight`),
    ...loadFeedForward(c, mtpLayerIsSparse(c, source), LAYER, mtpExpertLayout(c, source), source, backend),
  };
}
