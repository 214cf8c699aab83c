// A random EAGLE-3 head for a test model (loader/eagle3-head.ts reads what this writes): the published heads' layout
// (config.json of LlamaForCausalLMEagle3, fc, midlayer.*, norm, lm_head, d2t I64 and t2d BOOL) at the target's
// sizes, its weights drawn as make-test-model draws a checkpoint's.

import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { SAFETENSORS_DTYPE } from '../../loader/dtype.js';
import { writeRawSafetensors } from '../../loader/safetensors-write.js';
import type { FloatDType } from '../../loader/types.js';
import { initFor, randomTensorChunks } from './weights.js';

export interface MakeTestEagle3HeadOptions {
  /** The target model's directory (make-test-model's). */
  target: string;
  outDir: string;
  dtype?: FloatDType;
  seed?: number;
  /** Rows of the lm_head; below the target's vocabulary, d2t maps draft id i to floor(i x vocab / draft). */
  draftVocabSize?: number;
  /** eagle_config.eagle_aux_hidden_state_layer_ids; absent: none (vLLM's default for the target). */
  auxLayerIds?: number[];
  normBeforeResidual?: boolean;
  /** Write embed_tokens (default false: the head embeds with the target's table, as most published heads). */
  embedTokens?: boolean;
  /** Write lm_head (default true; without it the draft vocabulary must be the target's). */
  lmHead?: boolean;
  /** Standard deviation of linear weights (default 0.02, make-test-model's). */
  linearStd?: number;
}

function concatChunks(chunks: Iterable<Uint8Array>): Uint8Array {
  const parts = [...chunks];
  const out = new Uint8Array(parts.reduce((n, c) => n + c.byteLength, 0));
  let at = 0;
  for (const c of parts) {
    out.set(c, at);
    at += c.byteLength;
  }
  return out;
}

/** Writes the head's directory; returns its config.json object. */
export function makeTestEagle3Head(opts: MakeTestEagle3HeadOptions): Record<string, unknown> {
  const dtype = opts.dtype ?? 'f32';
  const target = JSON.parse(readFileSync(join(opts.target, 'config.json'), 'utf8')) as Record<string, unknown>;
  const [H, vocab] = [target.hidden_size as number, target.vocab_size as number];
  const heads = target.num_attention_heads as number;
  const kvHeads = (target.num_key_value_heads ?? heads) as number;
  const headDim = (target.head_dim ?? H / heads) as number;
  const I = target.intermediate_size as number;
  const draft = opts.draftVocabSize ?? vocab;
  const config: Record<string, unknown> = {
    architectures: ['LlamaForCausalLMEagle3'], model_type: 'llama', hidden_size: H, intermediate_size: I,
    num_hidden_layers: 1, num_attention_heads: heads, num_key_value_heads: kvHeads, head_dim: headDim, hidden_act: 'silu',
    vocab_size: vocab, draft_vocab_size: draft, max_position_embeddings: target.max_position_embeddings,
    rope_theta: target.rope_theta, rope_scaling: target.rope_scaling ?? null, rms_norm_eps: target.rms_norm_eps ?? 1e-6,
    tie_word_embeddings: false, attention_bias: false, torch_dtype: { bf16: 'bfloat16', f16: 'float16', f32: 'float32' }[dtype],
    ...(opts.normBeforeResidual ? { norm_before_residual: true } : {}),
    ...(opts.auxLayerIds ? { eagle_config: { eagle_aux_hidden_state_layer_ids: opts.auxLayerIds } } : {}),
  };
  const shapes: [string, number[]][] = [
    ['fc.weight', [H, 3 * H]],
    ['midlayer.input_layernorm.weight', [H]],
    ['midlayer.hidden_norm.weight', [H]],
    ['midlayer.self_attn.q_proj.weight', [heads * headDim, 2 * H]],
    ['midlayer.self_attn.k_proj.weight', [kvHeads * headDim, 2 * H]],
    ['midlayer.self_attn.v_proj.weight', [kvHeads * headDim, 2 * H]],
    ['midlayer.self_attn.o_proj.weight', [H, heads * headDim]],
    ['midlayer.post_attention_layernorm.weight', [H]],
    ['midlayer.mlp.gate_proj.weight', [I, H]],
    ['midlayer.mlp.up_proj.weight', [I, H]],
    ['midlayer.mlp.down_proj.weight', [H, I]],
    ['norm.weight', [H]],
    ...(opts.lmHead ?? true ? [['lm_head.weight', [draft, H]] as [string, number[]]] : []),
    ...(opts.embedTokens ? [['embed_tokens.weight', [vocab, H]] as [string, number[]]] : []),
  ];
  const seed = opts.seed ?? 0;
  const std = opts.linearStd ?? 0.02;
  const tensors = shapes.map(([name, shape]) => ({ name, dtype: SAFETENSORS_DTYPE[dtype], shape,
    data: concatChunks(randomTensorChunks({ name, dtype, shape }, seed, initFor(name, std))) }));
  if (draft < vocab) {
    // increasing target ids spread over the vocabulary, as a head trained on the most frequent tokens has them
    const d2t = new BigInt64Array(draft);
    const t2d = new Uint8Array(vocab);
    for (let i = 0; i < draft; i++) {
      const id = Math.floor((i * vocab) / draft);
      d2t[i] = BigInt(id - i);
      t2d[id] = 1;
    }
    tensors.push({ name: 'd2t', dtype: 'I64', shape: [draft], data: new Uint8Array(d2t.buffer) });
    tensors.push({ name: 't2d', dtype: 'BOOL', shape: [vocab], data: t2d });
  }
  const dir = resolve(opts.outDir);
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, 'config.json'), JSON.stringify(config, null, 2) + '\n');
  writeRawSafetensors(join(dir, 'model.safetensors'), tensors);
  return config;
}
