// An EAGLE-3 head (vLLM's Eagle3LlamaForCausalLM, llama_eagle3.py) over Backend ops. At position t it reads three of
// the target's hidden states at t (the residual stream entering the target's layers auxLayers[0..2]: vLLM's
// aux_hidden_states, hidden_states + residual before each of those layers) and the embedding of the token x_{t+1},
// and predicts x_{t+2}:
//
//   h        = fc [a_0 | a_1 | a_2]                  the first proposal's (vLLM's combine_hidden_states); a chained
//                                                    proposal's h is the head's own prenorm output at t - 1 instead
//   residual = h  (norm_before_residual: hidden_norm(h))
//   x        = [ input_layernorm(embed(x_{t+1})) | hidden_norm(h) ]          [T, 2 hidden]: q, k, v take both
//   one Llama decoder layer on x and residual: its attention keeps K and V in the model's last KV cache layer
//   prenorm  = residual after the layer's MLP is added; out = norm(prenorm)
//   logits   = lm_head(out) over the draft vocabulary; a draft id i is target id d2t's (i + d2t[i])
//
// vLLM's proposer feeds the head's second output (the prenorm residual) back as h for the next proposal, and takes
// the logits from the first. The three target states are carried as three parts of Backend.carry (model.ts keeps
// them during the target's forward), the head's prenorm output as part 0 (what a chained forward reads).

import type { Tensor } from '../backend/backend.js';
import type { DecoderLayer } from './layers/decoder-layer.js';
import type { LayerContext } from './layers/types.js';

/** Where a forward of the head takes h: fc over the target's carried states, or its own last prenorm output. */
export type Eagle3Input = 'target' | 'head';

export interface Eagle3HeadParts {
  /** [hidden, 3 hidden]. */
  fc: Tensor;
  hiddenNorm: Tensor;
  /**
   * Its decoder layer: inputNorm is input_layernorm (of the embedding), the attention's qkv takes [T, 2 hidden], and
   * it keeps its K and V in the model's last KV cache layer.
   */
  layer: DecoderLayer;
  norm: Tensor;
  /** The head's embed_tokens, or the target's where the checkpoint has none. */
  embedTokens: Tensor;
  /** [draftVocab, hidden]: the head's lm_head, or the target's where the checkpoint has none (draft vocab = vocab). */
  lmHead: Tensor;
  normBeforeResidual: boolean;
  /** Its norms' epsilon (its config's rms_norm_eps, which may differ from the target's). */
  eps: number;
  /** The target layers whose inputs it reads, in fc's column order. */
  auxLayers: readonly number[];
  /** Draft id -> target id, or null: the same ids. */
  draftToTarget: Int32Array | null;
}

export class Eagle3Head {
  constructor(readonly parts: Eagle3HeadParts) {}

  /**
   * The head's output (after its final norm) and its prenorm residual, [numTokens, hidden] each, for the step's
   * tokens: each token's id is the token after its position, its h from the carried rows the step names
   * (ForwardBatch.carryRows) of the parts `input` says.
   */
  forward(input: Eagle3Input, ctx: LayerContext): { out: Tensor; prenorm: Tensor } {
    const { backend: b, step, eps } = ctx;
    const p = this.parts;
    const carry = b.carry;
    if (!carry) throw new Error('Eagle3Head: the backend keeps no hidden states between forwards');
    const h = input === 'target' ? b.matmul(b.concatColumns([0, 1, 2].map((part) => carry.rows(step, part))), p.fc, 'eagle3_fc')
      : carry.rows(step, 0);
    const embeds = b.rmsNorm(b.embedding(p.embedTokens, step), p.layer.inputNorm, eps);
    const normed = b.rmsNorm(h, p.hiddenNorm, eps);
    // concatColumns copies `normed` before the layer adds into the residual in place (which may be `normed` itself)
    const x = b.concatColumns([embeds, normed]);
    const residual = p.normBeforeResidual ? normed : h;
    b.beginLayer(0);
    const out = p.layer.forward(x, residual, null, ctx);
    b.endLayers();
    return { out: b.addRmsNorm(out.ffnOut!, residual, p.norm, eps), prenorm: residual };
  }

  /** Target ids of greedy draft ids (in place). */
  toTargetIds(ids: Int32Array): Int32Array {
    const map = this.parts.draftToTarget;
    if (map) for (let i = 0; i < ids.length; i++) ids[i] = map[ids[i]!]!;
    return ids;
  }
}
