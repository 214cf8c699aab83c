// Mixture-of-experts configs: every routing field read as transformers reads it, and what Quire does not run refused
// at load, naming the field.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseModelConfig } from '../../src/loader/config.js';
import { ModelLoadError } from '../../src/loader/errors.js';
import { repoRoot } from './helpers.js';

const shapes = JSON.parse(readFileSync(join(repoRoot(), 'bench', 'shapes.json'), 'utf8')) as Record<string, Record<string, unknown>>;
const qwen3Moe = shapes['qwen3-30b-a3b']!;
// Mixtral-8x7B-v0.1's config.json fields
const mixtral = {
  architectures: ['MixtralForCausalLM'], model_type: 'mixtral', hidden_size: 4096, intermediate_size: 14336,
  num_hidden_layers: 32, num_attention_heads: 32, num_key_value_heads: 8, vocab_size: 32000, max_position_embeddings: 32768,
  rope_theta: 1e6, rms_norm_eps: 1e-5, num_local_experts: 8, num_experts_per_tok: 2, router_aux_loss_coef: 0.02,
  sliding_window: null, tie_word_embeddings: false, torch_dtype: 'bfloat16', hidden_act: 'silu',
};

function refused(json: Record<string, unknown>, ...parts: string[]): void {
  assert.throws(() => parseModelConfig(json, '/m/config.json'), (err: unknown) => {
    assert.ok(err instanceof ModelLoadError, String(err));
    for (const p of parts) assert.ok(err.message.includes(p), `"${err.message}" lacks "${p}"`);
    return true;
  });
}

test('Qwen3-30B-A3B: 128 experts, 8 routed, renormalized, every layer sparse; attention as Qwen3 (qk norm)', () => {
  const c = parseModelConfig(qwen3Moe, 'config.json');
  assert.equal(c.architecture, 'qwen3_moe');
  assert.equal(c.qkNorm, true);
  assert.deepEqual(c.moe, { numExperts: 128, topK: 8, expertIntermediateSize: 768, renormalize: true,
    sharedExpertIntermediateSize: null, sparseLayers: Array(48).fill(true) });
  assert.equal(parseModelConfig({ ...qwen3Moe, architectures: undefined }, 'c').architecture, 'qwen3_moe', 'model_type alone');
});

test('Qwen3-MoE: decoder_sparse_step and mlp_only_layers pick the sparse layers; norm_topk_prob defaults to false', () => {
  const c = parseModelConfig({ ...qwen3Moe, num_hidden_layers: 6, decoder_sparse_step: 2, mlp_only_layers: [3],
    norm_topk_prob: undefined }, 'c');
  // transformers: sparse where layer not in mlp_only_layers and (layer + 1) % decoder_sparse_step == 0
  assert.deepEqual(c.moe?.sparseLayers, [false, true, false, false, false, true]);
  assert.equal(c.moe?.renormalize, false);
});

test('Mixtral: num_local_experts, top 2, always renormalized, every layer sparse, expert width intermediate_size', () => {
  const c = parseModelConfig(mixtral, 'config.json');
  assert.equal(c.architecture, 'mixtral');
  assert.equal(c.qkNorm, false);
  assert.equal(c.slidingWindow, null);
  assert.deepEqual(c.moe, { numExperts: 8, topK: 2, expertIntermediateSize: 14336, renormalize: true,
    sharedExpertIntermediateSize: null, sparseLayers: Array(32).fill(true) });
  assert.equal(parseModelConfig({ ...mixtral, sliding_window: 4096 }, 'c').slidingWindow, 4096, 'as Mistral: used when set');
});

test('dense configs carry no MoE fields', () => {
  assert.equal(parseModelConfig(shapes['qwen3-8b'], 'c').moe, null);
});

test('what Quire does not run is refused at load, naming the field', () => {
  refused({ ...qwen3Moe, shared_expert_intermediate_size: 5632 }, '"shared_expert_intermediate_size"', 'shared experts are not supported');
  refused({ ...qwen3Moe, num_experts_per_tok: 129 }, '"num_experts_per_tok" (129)', 'larger than the number of experts (128)');
  refused({ ...qwen3Moe, num_experts: undefined }, '"num_experts" is missing');
  refused({ ...qwen3Moe, moe_intermediate_size: 0 }, '"moe_intermediate_size" must be a positive integer');
  refused({ ...qwen3Moe, mlp_only_layers: [48] }, '"mlp_only_layers"', 'below 48');
  refused({ ...qwen3Moe, norm_topk_prob: 'yes' }, '"norm_topk_prob" must be true or false');
  refused({ ...qwen3Moe, decoder_sparse_step: 0 }, '"decoder_sparse_step"');
  refused({ ...mixtral, num_local_experts: 1.5 }, '"num_local_experts" must be a positive integer');
});
