// The hybrid families' checkpoint names -> backend tensors: Qwen3.5 / Qwen3.6 and their mixture-of-experts variant
// (transformers' Qwen3_5ForCausalLM / Qwen3_5MoeForCausalLM: model.*; the published checkpoints,
// Qwen3_5ForConditionalGeneration / Qwen3_5MoeForConditionalGeneration: model.language_model.*, beside a vision tower
// model.visual.*, which Quire leaves unread and says so once, and an MTP head mtp.*, read only for --speculative-config's
// mtp method: qwen3_5-mtp-weights.ts) and Qwen3-Next (model.*, and an MTP head). Per layer:
//   full attention:  self_attn.q_proj [H * 2D, hidden] (per head: D query rows, then D output-gate rows),
//                    k_proj / v_proj [KVH * D, hidden], o_proj [hidden, H * D], q_norm / k_norm [D]
//   linear attention (gated DeltaNet): linear_attn.in_proj_qkv [2 Hk Dk + Hv Dv, hidden], in_proj_z [Hv Dv, hidden],
//                    in_proj_b / in_proj_a [Hv, hidden] (Qwen3-Next: in_proj_qkvz and in_proj_ba instead, their rows
//                    grouped per key head: qwen3_next-weights.ts), conv1d.weight [2 Hk Dk + Hv Dv, 1, K],
//                    A_log / dt_bias [Hv], norm.weight [Dv], out_proj [hidden, Hv Dv]
//   every layer:     input_layernorm, post_attention_layernorm [hidden], and the MLP: a dense one or the experts
//                    (hybrid-moe-weights.ts)
// At load: q_proj's rows are split into q (fused with k and v, as the attention op takes them) and the gate; b and
// a are fused into one [2 Hv, hidden] projection; the (1 + w) RMSNorms' weights are uploaded as 1 + w (f32 sums,
// as transformers computes them), so the ordinary rmsNorm op applies them. The gated norm's weight is used as is.

import type { Backend, Tensor } from '../../backend/backend.js';
import { bytesToF32 } from '../../loader/dtype.js';
import { hybridFamilyName, isHybridArchitecture } from '../../loader/hybrid-config.js';
import type { HostTensor, ModelConfig, WeightSource } from '../../loader/types.js';
import { outerTensors, validateWeights, type ExpectedTensor } from './dense-weights.js';
import type { DeltaNetLayerWeights } from '../layers/deltanet.js';
import { partsUploader, rowRuns, type PartsUpload } from './weight-parts.js';
import { addFeedForwardTensors, expertLayout, loadFeedForward, type ExpertLayout, type HybridFeedForwardWeights } from './hybrid-moe-weights.js';
import { qwen3NextInProjOrder } from './qwen3_next-weights.js';

export interface Qwen35AttentionWeights {
  /** [(H + 2 KVH) D, hidden]: q, k, v rows. */
  qkv: Tensor;
  /** [H D, hidden]: the output gate's rows of q_proj. */
  gate: Tensor;
  qNorm: Tensor;
  kNorm: Tensor;
  o: Tensor;
}

/** A gated DeltaNet layer's tensors: the layer's weights, its out_proj a bare weight (no bias in these checkpoints). */
export type Qwen35DeltaNetWeights = Omit<DeltaNetLayerWeights, 'outProj'> & { outProj: Tensor };

export type Qwen35LayerWeights = {
  inputNorm: Tensor;
  postAttentionNorm: Tensor;
  /** One of the two, as layer_types says. */
  attention: Qwen35AttentionWeights | null;
  deltaNet: Qwen35DeltaNetWeights | null;
} & HybridFeedForwardWeights;

/** A pipeline stage's leaves out what it does not run (dense-weights.ts outerTensors): null there. */
export interface Qwen35Weights {
  embedTokens: Tensor | null;
  layers: Qwen35LayerWeights[];
  finalNorm: Tensor | null;
  lmHead: Tensor | null;
}

const NESTED = 'model.language_model.';

/** Where the text model's tensors sit: under model.language_model. in a checkpoint with its vision tower. */
export function qwen35Prefix(source: Pick<WeightSource, 'has'>): string {
  return source.has(`${NESTED}embed_tokens.weight`) ? NESTED : 'model.';
}

function hybridOf(c: ModelConfig) {
  if (!c.hybrid) throw new Error('qwen3_5-weights: not a hybrid config');
  return c.hybrid;
}

/**
 * Every checkpoint tensor of the text model, with its shape and dtype; the routed experts in `experts`' layout (by
 * default the family's published one: hybrid-moe-weights.ts).
 */
export function qwen35ExpectedTensors(c: ModelConfig, prefix = 'model.', experts: ExpertLayout = expertLayout(c, prefix, null)): ExpectedTensor[] {
  const h = hybridOf(c);
  const hidden = c.hiddenSize;
  const D = c.headDim;
  const keyDim = h.linearNumKeyHeads * h.linearKeyHeadDim;
  const valueDim = h.linearNumValueHeads * h.linearValueHeadDim;
  const out: ExpectedTensor[] = [];
  const add = (name: string, shape: number[]): void => void out.push({ name, shape, dtype: c.dtype });
  const outer = outerTensors(c);
  if (outer.embedTokens) add(`${prefix}embed_tokens.weight`, [c.vocabParallel?.rows ?? c.vocabSize, hidden]);
  h.layerTypes.forEach((type, l) => {
    const p = `${prefix}layers.${l}.`;
    add(`${p}input_layernorm.weight`, [hidden]);
    if (type === 'full_attention') {
      addAttentionTensors(c, p, add);
    } else {
      const a = `${p}linear_attn.`;
      if (c.architecture === 'qwen3_next') {
        add(`${a}in_proj_qkvz.weight`, [2 * keyDim + 2 * valueDim, hidden]);
        add(`${a}in_proj_ba.weight`, [2 * h.linearNumValueHeads, hidden]);
      } else {
        add(`${a}in_proj_qkv.weight`, [2 * keyDim + valueDim, hidden]);
        add(`${a}in_proj_z.weight`, [valueDim, hidden]);
        add(`${a}in_proj_b.weight`, [h.linearNumValueHeads, hidden]);
        add(`${a}in_proj_a.weight`, [h.linearNumValueHeads, hidden]);
      }
      add(`${a}conv1d.weight`, [2 * keyDim + valueDim, 1, h.linearConvKernel]);
      add(`${a}dt_bias`, [h.linearNumValueHeads]);
      add(`${a}A_log`, [h.linearNumValueHeads]);
      add(`${a}norm.weight`, [h.linearValueHeadDim]);
      add(`${a}out_proj.weight`, [hidden, valueDim]);
    }
    add(`${p}post_attention_layernorm.weight`, [hidden]);
    addFeedForwardTensors(c, c.moe?.sparseLayers[l] ?? false, p, experts, add);
  });
  if (outer.finalNorm) add(`${prefix}norm.weight`, [hidden]);
  if (outer.lmHead) add('lm_head.weight', [c.vocabParallel?.rows ?? c.vocabSize, hidden]);
  return out;
}

/** A full-attention layer's self_attn.* tensors (`p`: the layer's prefix, e.g. model.layers.3.). */
export function addAttentionTensors(c: ModelConfig, p: string, add: (name: string, shape: number[]) => void): void {
  const D = c.headDim;
  add(`${p}self_attn.q_proj.weight`, [2 * c.numHeads * D, c.hiddenSize]);
  add(`${p}self_attn.k_proj.weight`, [c.numKvHeads * D, c.hiddenSize]);
  add(`${p}self_attn.v_proj.weight`, [c.numKvHeads * D, c.hiddenSize]);
  add(`${p}self_attn.o_proj.weight`, [c.hiddenSize, c.numHeads * D]);
  add(`${p}self_attn.q_norm.weight`, [D]);
  add(`${p}self_attn.k_norm.weight`, [D]);
}

/** The checkpoint tensors Quire leaves unread (vision tower, MTP head), counted by kind; null when there are none. */
export function unreadTensorsNote(source: Pick<WeightSource, 'names'>, family = 'Qwen3.5', readsMtp = false): string | null {
  const names = source.names();
  const visual = names.filter((n) => n.startsWith('model.visual.') || n.startsWith('visual.')).length;
  const mtp = readsMtp ? 0 : names.filter((n) => n.startsWith('mtp.')).length;
  const parts = [visual > 0 ? `${visual} vision-tower tensors (model.visual.*)` : '', mtp > 0 ? `${mtp} MTP-head tensors (mtp.*)` : '']
    .filter((p) => p !== '');
  return parts.length === 0 ? null : `${family} checkpoint: serving its text model; ${parts.join(' and ')} left unread`;
}

/** A (1 + w) RMSNorm's weight as the f32 values 1 + w. */
export function onePlus(t: HostTensor): HostTensor {
  const w = bytesToF32(t.dtype, t.data).map((v) => 1 + v);
  return { name: t.name, dtype: 'f32', shape: t.shape, data: new Uint8Array(w.buffer) };
}

const noted = new Set<string>();

/**
 * A gated DeltaNet layer's input projections as one weight (DeltaNetLayerWeights.inProj): in_proj_qkv, in_proj_z,
 * in_proj_b, in_proj_a, read as they are, or (Qwen3-Next's in_proj_qkvz, in_proj_ba) reordered.
 */
function deltaNetInProj(c: ModelConfig, a: string, fused: PartsUpload): Tensor {
  const name = `${a}in_proj.weight`;
  if (c.architecture !== 'qwen3_next') {
    return fused(name, ['in_proj_qkv', 'in_proj_z', 'in_proj_b', 'in_proj_a'].map((n) => `${a}${n}.weight`));
  }
  const order = qwen3NextInProjOrder(hybridOf(c));
  const [qkvz, ba] = [`${a}in_proj_qkvz.weight`, `${a}in_proj_ba.weight`];
  return fused(name, [{ name: qkvz, rows: rowRuns(order.qkv) }, { name: qkvz, rows: rowRuns(order.z) },
    { name: ba, rows: rowRuns(order.ba) }]);
}

/** A full-attention layer's self_attn.* (`p`: the layer's prefix), validated already. */
export function loadAttention(c: ModelConfig, p: string, source: WeightSource,
  backend: Backend): Qwen35AttentionWeights {
  const a = `${p}self_attn.`;
  const D = c.headDim;
  const fused = partsUploader(source, backend);
  // per head h: rows [2hD, 2hD + D) are its query, [2hD + D, 2hD + 2D) its gate (transformers chunks each head's 2D)
  const q = `${a}q_proj.weight`;
  const heads = (from: number) =>
    Array.from({ length: c.numHeads }, (_, h) => [2 * h * D + from, 2 * h * D + from + D] as const);
  const norm = (n: string): Tensor => backend.upload(onePlus(source.read(n)));
  return {
    qkv: fused(`${a}qkv_proj.weight`, [{ name: q, rows: heads(0) }, `${a}k_proj.weight`, `${a}v_proj.weight`]),
    gate: fused(`${a}gate_proj.weight`, [{ name: q, rows: heads(D) }]),
    qNorm: norm(`${a}q_norm.weight`), kNorm: norm(`${a}k_norm.weight`),
    o: fused(`${a}o_proj.weight`, [`${a}o_proj.weight`]),
  };
}

/** The text model's weights (`readsMtp`: the MTP head is loaded too, qwen3_5-mtp-weights.ts, so not noted as unread). */
export function loadQwen35Weights(c: ModelConfig, source: WeightSource, backend: Backend, readsMtp = false): Qwen35Weights {
  const h = hybridOf(c);
  const prefix = qwen35Prefix(source);
  const experts = expertLayout(c, prefix, source);
  validateWeights(c, source, qwen35ExpectedTensors(c, prefix, experts));
  const family = isHybridArchitecture(c.architecture) ? hybridFamilyName(c.architecture) : c.architecture;
  const note = unreadTensorsNote(source, family, readsMtp);
  if (note !== null && !noted.has(family)) {
    noted.add(family);
    process.emitWarning(note);
  }
  const fused = partsUploader(source, backend);
  const up = (n: string): Tensor => fused(n, [n]);
  const norm = (n: string): Tensor => backend.upload(onePlus(source.read(n)));
  const layers = h.layerTypes.map((type, l): Qwen35LayerWeights => {
    const p = `${prefix}layers.${l}.`;
    let attention: Qwen35AttentionWeights | null = null;
    let deltaNet: Qwen35DeltaNetWeights | null = null;
    if (type === 'full_attention') {
      attention = loadAttention(c, p, source, backend);
    } else {
      const a = `${p}linear_attn.`;
      deltaNet = {
        inProj: deltaNetInProj(c, a, fused),
        conv: up(`${a}conv1d.weight`),  // [C, 1, K] as [C, K] (weight-parts.ts)
        aLog: up(`${a}A_log`), dtBias: up(`${a}dt_bias`), norm: up(`${a}norm.weight`), outProj: up(`${a}out_proj.weight`),
      };
    }
    return {
      inputNorm: norm(`${p}input_layernorm.weight`), postAttentionNorm: norm(`${p}post_attention_layernorm.weight`),
      attention, deltaNet, ...loadFeedForward(c, c.moe?.sparseLayers[l] ?? false, p, experts, source, backend),
    };
  });
  const outer = outerTensors(c);
  const embedTokens = outer.embedTokens ? up(`${prefix}embed_tokens.weight`) : null;
  return { embedTokens, layers, finalNorm: outer.finalNorm ? norm(`${prefix}norm.weight`) : null,
    lmHead: outer.lmHead ? up('lm_head.weight') : outer.finalNorm ? embedTokens : null };
}
