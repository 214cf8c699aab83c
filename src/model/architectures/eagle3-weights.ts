// An EAGLE-3 head's checkpoint (loader/eagle3-head.ts reads its directory) checked against its target and loaded:
//   fc.weight [hidden, 3 hidden]                 over the three target states, side by side in auxLayers' order
//   midlayer.input_layernorm.weight [hidden]     of the embedding
//   midlayer.hidden_norm.weight [hidden]         of h
//   midlayer.self_attn.{q,k,v}_proj.weight [*, 2 hidden], o_proj [hidden, heads x head_dim]
//   midlayer.post_attention_layernorm.weight, midlayer.mlp.{gate,up,down}_proj.weight   a Llama layer's
//   norm.weight [hidden]; lm_head.weight [draft_vocab_size, hidden]; embed_tokens.weight [vocab, hidden]
// (layers.0.* in place of midlayer.* as vLLM also takes). Without embed_tokens the head embeds with the target's
// table, and without lm_head (only where the draft vocabulary is the target's) it reads the target's, as vLLM shares
// them. Its K and V go to one more KV cache layer of the target's pages, so its KV shape must be the target's.

import type { Backend, Tensor } from '../../backend/backend.js';
import type { Eagle3HeadDir } from '../../loader/eagle3-head.js';
import type { ModelConfig } from '../../loader/types.js';
import { Attention } from '../layers/attention.js';
import { DecoderLayer } from '../layers/decoder-layer.js';
import { DenseMlp } from '../layers/mlp.js';
import { Eagle3Head } from '../eagle3-head.js';
import { attentionShape } from './dense.js';
import { validateWeights, type ExpectedTensor } from './dense-weights.js';
import { partsUploader } from './weight-parts.js';

/** vLLM's default target layers (get_eagle3_aux_hidden_state_layers): early, middle and late. */
export function defaultEagle3AuxLayers(numLayers: number): number[] {
  return [2, Math.floor(numLayers / 2), numLayers - 3];
}

/** The target layers whose inputs the head reads: its config's, or vLLM's default for the target. */
export function eagle3AuxLayers(head: Pick<Eagle3HeadDir, 'auxLayerIds'>, target: Pick<ModelConfig, 'numLayers'>): number[] {
  return head.auxLayerIds ?? defaultEagle3AuxLayers(target.numLayers);
}

/** The head's decoder layer's prefix in its checkpoint: midlayer. (the published heads') or layers.0. */
function layerPrefix(head: Pick<Eagle3HeadDir, 'weights'>): string {
  return !head.weights.has('midlayer.input_layernorm.weight') && head.weights.has('layers.0.input_layernorm.weight') ? 'layers.0.' : 'midlayer.';
}

/** Why `head` cannot propose for `target`, naming the field or tensor, or null. */
export function eagle3Refusal(head: Eagle3HeadDir, target: ModelConfig): string | null {
  const c = head.config;
  if (c.hiddenSize !== target.hiddenSize) return `hidden_size is ${c.hiddenSize}, the target's ${target.hiddenSize}`;
  if (c.vocabSize !== target.vocabSize) return `vocab_size is ${c.vocabSize}, the target's ${target.vocabSize}`;
  if (c.numKvHeads !== target.numKvHeads || c.headDim !== target.headDim) {
    return `its attention has ${c.numKvHeads} KV heads of ${c.headDim}, the target's ${target.numKvHeads} of ${target.headDim} ` +
      '(its K and V live in the target\'s KV cache pages)';
  }
  const ids = eagle3AuxLayers(head, target);
  const field = head.auxLayerIds ? 'eagle_aux_hidden_state_layer_ids' : 'vLLM\'s default eagle_aux_hidden_state_layer_ids';
  if (ids.some((i) => i < 0 || i >= target.numLayers)) return `${field} (${ids.join(', ')}) name layers outside the target's ${target.numLayers}`;
  // vLLM keeps a layer's input once however often it is named, and fc would then lack a third
  if (new Set(ids).size !== ids.length) return `${field} (${ids.join(', ')}) name a layer twice; fc reads three different ones`;
  if (!head.weights.has('lm_head.weight') && head.draftVocabSize !== target.vocabSize) {
    return `the checkpoint has no lm_head.weight and draft_vocab_size (${head.draftVocabSize}) is not the target's vocabulary, whose lm_head it would read`;
  }
  try {
    validateWeights(c, head.weights, eagle3ExpectedTensors(head));
  } catch (err) {
    return (err as Error).message;
  }
  return null;
}

/** The head's tensors, with their shapes and dtype (lm_head and embed_tokens only where the checkpoint has them). */
export function eagle3ExpectedTensors(head: Eagle3HeadDir): ExpectedTensor[] {
  const c = head.config;
  const [H, I, p] = [c.hiddenSize, c.intermediateSize, layerPrefix(head)];
  const out: ExpectedTensor[] = [];
  const add = (name: string, shape: number[]): void => void out.push({ name, shape, dtype: c.dtype });
  add('fc.weight', [H, 3 * H]);
  for (const n of ['input_layernorm', 'hidden_norm', 'post_attention_layernorm']) add(`${p}${n}.weight`, [H]);
  add(`${p}self_attn.q_proj.weight`, [c.numHeads * c.headDim, 2 * H]);
  add(`${p}self_attn.k_proj.weight`, [c.numKvHeads * c.headDim, 2 * H]);
  add(`${p}self_attn.v_proj.weight`, [c.numKvHeads * c.headDim, 2 * H]);
  add(`${p}self_attn.o_proj.weight`, [H, c.numHeads * c.headDim]);
  add(`${p}mlp.gate_proj.weight`, [I, H]);
  add(`${p}mlp.up_proj.weight`, [I, H]);
  add(`${p}mlp.down_proj.weight`, [H, I]);
  add('norm.weight', [H]);
  if (head.weights.has('lm_head.weight')) add('lm_head.weight', [head.draftVocabSize, H]);
  if (head.weights.has('embed_tokens.weight')) add('embed_tokens.weight', [c.vocabSize, H]);
  return out;
}

/**
 * Loads the head for `target` (eagle3Refusal first: it throws naming what is wrong); `kvLayer` is its attention's KV
 * cache layer (after the target's), `shared` the target's embedding table and lm_head.
 */
export function loadEagle3Head(head: Eagle3HeadDir, target: ModelConfig, backend: Backend, kvLayer: number,
  shared: { embedTokens: Tensor | null; lmHead: Tensor | null }): Eagle3Head {
  const why = eagle3Refusal(head, target);
  if (why) throw new Error(`EAGLE-3 head ${head.dir}: ${why}`);
  const source = head.weights;
  const fused = partsUploader(source, backend);
  const up = (name: string): Tensor => fused(name, [name]);
  const p = layerPrefix(head);
  const attn = `${p}self_attn.`;
  const qkv = fused(`${attn}qkv_proj.weight`, ['q_proj', 'k_proj', 'v_proj'].map((n) => `${attn}${n}.weight`));
  const gateUp = fused(`${p}mlp.gate_up_proj.weight`, ['gate_proj', 'up_proj'].map((n) => `${p}mlp.${n}.weight`));
  const layer = new DecoderLayer(up(`${p}input_layernorm.weight`),
    new Attention(attentionShape(head.config), { qkv: { weight: qkv, bias: null }, qNorm: null, kNorm: null,
      o: { weight: up(`${attn}o_proj.weight`), bias: null } }, kvLayer),
    up(`${p}post_attention_layernorm.weight`), new DenseMlp(gateUp, { weight: up(`${p}mlp.down_proj.weight`), bias: null }));
  const embedTokens = source.has('embed_tokens.weight') ? up('embed_tokens.weight') : shared.embedTokens;
  const lmHead = source.has('lm_head.weight') ? up('lm_head.weight') : shared.lmHead;
  if (!embedTokens || !lmHead) throw new Error(`EAGLE-3 head ${head.dir}: the target's embedding or lm_head is not loaded here`);
  return new Eagle3Head({ fc: up('fc.weight'), hiddenNorm: up(`${p}hidden_norm.weight`), layer, norm: up('norm.weight'),
    embedTokens, lmHead, normBeforeResidual: head.normBeforeResidual, eps: head.config.rmsNormEps, auxLayers: eagle3AuxLayers(head, target),
    draftToTarget: head.draftToTarget });
}
