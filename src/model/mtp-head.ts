// A multi-token-prediction head (Qwen3.5 / Qwen3.6, Qwen3-Next: mtp.* of their checkpoints, vLLM's
// Qwen3_5MultiTokenPredictor), over Backend ops. At position t it takes the target's final hidden state h_t (after
// the target's final norm, as vLLM hands the target's output to it) and the embedding of the token x_{t+1} after
// position t, and predicts x_{t+2}:
//
//   x   = fc [ rmsnorm(embed(x_{t+1})) * pre_fc_norm_embedding | rmsnorm(h_t) * pre_fc_norm_hidden ]
//   out = norm(layer(x))          one full-attention decoder layer (the target's kind: output-gated attention,
//                                 a dense MLP or the experts), attending over the head's own K and V of the positions
//                                 it has seen, then the head's final (1 + w) RMSNorm
//   logits = lm_head(out)         the target's lm_head
//
// For a further proposal vLLM applies it again one position on, on its own output: (out_t, the proposal x_{t+2}) at
// t + 1. fc is stored split by columns (architectures/qwen3_5-mtp-weights.ts), so x is fc_e e + fc_h h: the residual
// stream starts as fc_e e and the second product is added into it by the norm that makes the layer's input.

import type { Tensor } from '../backend/backend.js';
import type { DecoderLayer } from './layers/decoder-layer.js';
import type { LayerContext } from './layers/types.js';

export interface MtpHeadParts {
  preFcNormEmbedding: Tensor;
  preFcNormHidden: Tensor;
  fcEmbedding: Tensor;
  fcHidden: Tensor;
  /** Its one decoder layer, whose attention keeps its K and V in the model's last KV cache layer. */
  layer: DecoderLayer;
  norm: Tensor;
}

export class MtpHead {
  constructor(readonly parts: MtpHeadParts) {}

  /**
   * The head's output [numTokens, hidden] (after its final norm) for the step's tokens: each token's id is the token
   * after its position, its hidden state the carried row the step names (ForwardBatch.carryRows).
   */
  forward(embedTokens: Tensor, ctx: LayerContext): Tensor {
    const { backend: b, step, eps } = ctx;
    const p = this.parts;
    if (!b.carry) throw new Error('MtpHead: the backend keeps no hidden states between forwards');
    const hidden = b.carry.rows(step);
    const embedded = b.embedding(embedTokens, step);
    const residual = b.matmul(b.rmsNorm(embedded, p.preFcNormEmbedding, eps), p.fcEmbedding, 'mtp_fc');
    const x = b.addRmsNorm(b.matmul(b.rmsNorm(hidden, p.preFcNormHidden, eps), p.fcHidden, 'mtp_fc'), residual,
      p.layer.inputNorm, eps);
    b.beginLayer(0);
    const out = p.layer.forward(x, residual, null, ctx);
    b.endLayers();
    return b.addRmsNorm(out.ffnOut!, residual, p.norm, eps);
  }

}
