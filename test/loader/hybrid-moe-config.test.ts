// The hybrid mixtures of experts' config.json as transformers reads it: Qwen3.5-MoE (Qwen3_5MoeTextConfig: every layer
// sparse, top-k always renormalized, a shared expert; nested under text_config in the published checkpoints) and
// Qwen3-Next (Qwen3NextConfig: Qwen2-MoE's routing fields, norm_topk_prob true by default, RoPE fields at the top),
// with transformers' defaults, and what Quire refuses, by field.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseModelConfig } from '../../src/loader/config.js';
import { ModelLoadError } from '../../src/loader/errors.js';
import { testModelShapes } from '../../src/tools/test-model/shapes.js';
import { repoRoot } from './helpers.js';

const shapes = JSON.parse(readFileSync(join(repoRoot(), 'bench', 'shapes.json'), 'utf8')) as Record<string, Record<string, unknown>>;
const qwen35Moe = shapes['qwen3.5-35b-a3b']!;
const qwen35MoeText = qwen35Moe.text_config as Record<string, unknown>;
const next = shapes['qwen3-next-80b-a3b']!;
const tinyMoe = testModelShapes()['tiny-qwen3.5-moe']!;
const tinyNext = testModelShapes()['tiny-qwen3-next']!;

function refused(json: unknown, ...parts: string[]): void {
  assert.throws(() => parseModelConfig(json, '/m/config.json'), (err: unknown) => {
    assert.ok(err instanceof ModelLoadError, String(err));
    for (const p of parts) assert.ok(err.message.includes(p), `"${err.message}" lacks "${p}"`);
    return true;
  });
}

const allSparse = (n: number) => Array(n).fill(true) as boolean[];
const without = (json: Record<string, unknown>, ...fields: string[]) =>
  Object.fromEntries(Object.entries(json).filter(([k]) => !fields.includes(k)));

test('qwen3.5-35b-a3b: the text model under text_config; 256 experts of 512, 8 routed and renormalized, a shared expert of 512 in every layer', () => {
  const c = parseModelConfig(qwen35Moe, 'config.json');
  assert.equal(c.architecture, 'qwen3_5_moe');
  assert.deepEqual(c.moe, { numExperts: 256, topK: 8, expertIntermediateSize: 512, renormalize: true,
    sharedExpertIntermediateSize: 512, sparseLayers: allSparse(40) });
  assert.deepEqual([c.hiddenSize, c.numLayers, c.numHeads, c.numKvHeads, c.headDim, c.vocabSize, c.maxPositionEmbeddings],
    [2048, 40, 16, 2, 256, 248320, 262144]);
  // no intermediate_size in the config: the shared expert's width stands in (no dense MLP reads it)
  assert.equal(c.intermediateSize, 512);
  assert.deepEqual([c.ropeTheta, c.qkNorm, c.qkvBias, c.tieWordEmbeddings, c.dtype, c.slidingWindow], [1e7, true, false, false, 'bf16', null]);
  const h = c.hybrid!;
  assert.deepEqual([h.rotaryDim, h.linearNumKeyHeads, h.linearNumValueHeads, h.linearKeyHeadDim, h.linearValueHeadDim, h.linearConvKernel],
    [64, 16, 32, 128, 128, 4]);
  assert.equal(h.layerTypes.filter((t) => t === 'full_attention').length, 10);
  assert.equal(h.layerTypes[39], 'full_attention');
  // the text model alone: Qwen3_5MoeForCausalLM, or its model_type
  const flat = parseModelConfig({ ...qwen35MoeText, architectures: ['Qwen3_5MoeForCausalLM'] }, 'c');
  assert.deepEqual(flat.moe, c.moe);
  assert.equal(parseModelConfig(qwen35MoeText, 'c').architecture, 'qwen3_5_moe', 'model_type qwen3_5_moe_text alone');
  assert.equal(parseModelConfig({ ...qwen35Moe, architectures: undefined }, 'c').architecture, 'qwen3_5_moe', 'model_type qwen3_5_moe');
});

test('qwen3-next-80b-a3b: 512 experts, 10 routed (norm_topk_prob), a shared expert, every layer sparse; RoPE at the top level', () => {
  const c = parseModelConfig(next, 'config.json');
  assert.equal(c.architecture, 'qwen3_next');
  assert.deepEqual(c.moe, { numExperts: 512, topK: 10, expertIntermediateSize: 512, renormalize: true,
    sharedExpertIntermediateSize: 512, sparseLayers: allSparse(48) });
  assert.deepEqual([c.hiddenSize, c.intermediateSize, c.numLayers, c.numHeads, c.numKvHeads, c.headDim, c.vocabSize],
    [2048, 5120, 48, 16, 2, 256, 151936]);
  assert.deepEqual([c.ropeTheta, c.hybrid!.rotaryDim, c.qkNorm, c.slidingWindow], [5e6, 64, true, null]);
  // layer_types from full_attention_interval 4
  assert.deepEqual(c.hybrid!.layerTypes.slice(0, 8), ['linear_attention', 'linear_attention', 'linear_attention', 'full_attention',
    'linear_attention', 'linear_attention', 'linear_attention', 'full_attention']);
  assert.equal(parseModelConfig({ ...next, architectures: undefined }, 'c').architecture, 'qwen3_next', 'model_type alone');
});

test('tiny shapes: Qwen3-Next\'s mlp_only_layers dense and norm_topk_prob false read; Qwen3.5-MoE\'s every layer sparse', () => {
  const n = parseModelConfig(tinyNext, 'c');
  assert.deepEqual(n.moe, { numExperts: 8, topK: 3, expertIntermediateSize: 32, renormalize: false, sharedExpertIntermediateSize: 48,
    sparseLayers: [true, true, false, true] });
  assert.deepEqual(n.hybrid!.layerTypes, ['linear_attention', 'full_attention', 'linear_attention', 'full_attention']);
  assert.equal(n.hybrid!.rotaryDim, 4);
  const m = parseModelConfig(tinyMoe, 'c');
  assert.deepEqual(m.moe, { numExperts: 8, topK: 3, expertIntermediateSize: 24, renormalize: true, sharedExpertIntermediateSize: 48,
    sparseLayers: allSparse(4) });
  assert.equal(m.intermediateSize, 48);
});

test('transformers\' defaults: Qwen3-Next 512 experts top 10 renormalized, decoder_sparse_step; Qwen3.5-MoE 256 top 8; widths 512', () => {
  const n = parseModelConfig(without(tinyNext, 'num_experts', 'num_experts_per_tok', 'norm_topk_prob', 'moe_intermediate_size',
    'shared_expert_intermediate_size', 'mlp_only_layers'), 'c');
  assert.deepEqual(n.moe, { numExperts: 512, topK: 10, expertIntermediateSize: 512, renormalize: true, sharedExpertIntermediateSize: 512,
    sparseLayers: allSparse(4) });
  // transformers: sparse where the layer is not in mlp_only_layers and (layer + 1) % decoder_sparse_step == 0
  assert.deepEqual(parseModelConfig({ ...tinyNext, decoder_sparse_step: 2, mlp_only_layers: [3] }, 'c').moe!.sparseLayers,
    [false, true, false, false]);
  const m = parseModelConfig(without(tinyMoe, 'num_experts', 'num_experts_per_tok', 'moe_intermediate_size',
    'shared_expert_intermediate_size'), 'c');
  assert.deepEqual([m.moe!.numExperts, m.moe!.topK, m.moe!.expertIntermediateSize, m.moe!.sharedExpertIntermediateSize, m.intermediateSize],
    [256, 8, 512, 512, 512]);
  // a config's intermediate_size is not Qwen3.5-MoE's (transformers deletes the field)
  assert.equal(parseModelConfig({ ...tinyMoe, intermediate_size: 4096 }, 'c').intermediateSize, 48);
});

test('refused, naming the field: what transformers\' Qwen3.5-MoE ignores set otherwise, bad widths and counts, quantization', () => {
  refused({ ...tinyMoe, norm_topk_prob: false }, 'field "norm_topk_prob"', 'always renormalizes');
  refused({ ...tinyMoe, decoder_sparse_step: 2 }, 'field "decoder_sparse_step"', 'every Qwen3.5-MoE layer is sparse');
  refused({ ...tinyMoe, mlp_only_layers: [1] }, 'field "mlp_only_layers"', 'every Qwen3.5-MoE layer is sparse');
  refused({ ...qwen35Moe, text_config: { ...qwen35MoeText, shared_expert_intermediate_size: 0 } },
    'field "text_config.shared_expert_intermediate_size" must be a positive integer');
  refused({ ...qwen35Moe, text_config: { ...qwen35MoeText, num_experts_per_tok: 300 } },
    'field "text_config.num_experts_per_tok" (300) is larger than the number of experts (256)');
  refused({ ...qwen35Moe, quantization_config: { quant_method: 'fp8' } }, 'field "quantization_config"', 'Qwen3.5-MoE', 'bf16');
  refused({ ...next, quantization_config: { quant_method: 'fp8' } }, 'field "quantization_config"', 'Qwen3-Next');
  refused({ ...next, num_experts: 0 }, 'field "num_experts" must be a positive integer');
  refused({ ...next, shared_expert_intermediate_size: 'big' }, 'field "shared_expert_intermediate_size" must be a positive integer');
  refused({ ...next, mlp_only_layers: [48] }, 'field "mlp_only_layers"', 'below 48');
  refused({ ...next, norm_topk_prob: 1 }, 'field "norm_topk_prob" must be true or false');
  refused({ ...next, rope_scaling: { rope_type: 'yarn', factor: 4 } }, 'field "rope_scaling"', 'Qwen3-Next');
  refused({ ...next, attention_bias: true }, 'field "attention_bias"', 'Qwen3-Next');
  refused({ ...next, linear_num_value_heads: 24 }, 'field "linear_num_value_heads"', 'multiple of linear_num_key_heads');
});
