// Qwen3.5 / Qwen3.6 config.json as transformers' Qwen3_5TextConfig reads it: the text model alone or nested under
// text_config (the published multimodal checkpoints), the hybrid fields, and what Quire refuses, by field.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseModelConfig } from '../../src/loader/config.js';
import { ModelLoadError } from '../../src/loader/errors.js';
import { testModelShapes } from '../../src/tools/test-model/shapes.js';
import { repoRoot } from './helpers.js';

const shapes = JSON.parse(readFileSync(join(repoRoot(), 'bench', 'shapes.json'), 'utf8')) as Record<string, Record<string, unknown>>;
const tiny = testModelShapes()['tiny-qwen3.5']!;

function configError(json: unknown, ...parts: string[]): void {
  assert.throws(() => parseModelConfig(json, '/models/x/config.json'), (err: unknown) => {
    assert.ok(err instanceof ModelLoadError, String(err));
    for (const p of parts) assert.ok(err.message.includes(p), `"${err.message}" lacks "${p}"`);
    return true;
  });
}

test('qwen3.5-27b: the text model under text_config, every hybrid field as the model card gives it', () => {
  const c = parseModelConfig(shapes['qwen3.5-27b'], 'config.json');
  assert.equal(c.architecture, 'qwen3_5');
  assert.deepEqual([c.hiddenSize, c.intermediateSize, c.numLayers, c.numHeads, c.numKvHeads, c.headDim, c.vocabSize],
    [5120, 17408, 64, 24, 4, 256, 248320]);
  assert.equal(c.ropeTheta, 10000000);
  assert.equal(c.ropeScaling, null);
  assert.equal(c.maxPositionEmbeddings, 262144);
  assert.equal(c.tieWordEmbeddings, false);
  assert.equal(c.qkNorm, true);
  assert.equal(c.qkvBias, false);
  assert.equal(c.dtype, 'bf16');
  assert.equal(c.moe, null);
  const h = c.hybrid!;
  assert.equal(h.rotaryDim, 64);
  assert.deepEqual([h.linearNumKeyHeads, h.linearNumValueHeads, h.linearKeyHeadDim, h.linearValueHeadDim, h.linearConvKernel],
    [16, 48, 128, 128, 4]);
  assert.equal(h.layerTypes.filter((t) => t === 'full_attention').length, 16);
  assert.equal(h.layerTypes[3], 'full_attention');
  assert.equal(h.layerTypes[4], 'linear_attention');
});

test('Qwen3_5ForCausalLM (model_type qwen3_5_text): the fields at the top, rope_parameters read', () => {
  const c = parseModelConfig(tiny, 'config.json');
  assert.equal(c.architecture, 'qwen3_5');
  assert.deepEqual(c.hybrid, { layerTypes: ['linear_attention', 'full_attention', 'linear_attention', 'full_attention'],
    rotaryDim: 4, linearNumKeyHeads: 2, linearNumValueHeads: 4, linearKeyHeadDim: 16, linearValueHeadDim: 8, linearConvKernel: 4,
    mtp: { numLayers: 1, field: 'mtp_num_hidden_layers', dedicatedEmbeddings: false } });
  assert.equal(c.ropeTheta, 10000);
  // by model_type alone too
  assert.equal(parseModelConfig({ ...tiny, architectures: undefined }, 'c').architecture, 'qwen3_5');
});

test('the MTP head\'s layer count under vLLM\'s field name for the family, nested or not; absent where the config names none', () => {
  assert.deepEqual(parseModelConfig(shapes['qwen3.5-27b'], 'c').hybrid!.mtp,
    { numLayers: 1, field: 'text_config.mtp_num_hidden_layers', dedicatedEmbeddings: false });
  const next = testModelShapes()['tiny-qwen3-next']!;
  assert.deepEqual(parseModelConfig(next, 'c').hybrid!.mtp, { numLayers: 1, field: 'num_nextn_predict_layers', dedicatedEmbeddings: false });
  // Qwen3-Next's field is not Qwen3.5's: a config naming the other has none declared
  const { num_nextn_predict_layers: _, ...bare } = next;
  assert.equal(parseModelConfig({ ...bare, mtp_num_hidden_layers: 1 }, 'c').hybrid!.mtp, undefined);
  const { mtp_num_hidden_layers: __, ...none } = tiny;
  assert.equal(parseModelConfig(none, 'c').hybrid!.mtp, undefined);
  assert.deepEqual(parseModelConfig({ ...tiny, mtp_num_hidden_layers: 0, mtp_use_dedicated_embeddings: true }, 'c').hybrid!.mtp,
    { numLayers: 0, field: 'mtp_num_hidden_layers', dedicatedEmbeddings: true });
  configError({ ...tiny, mtp_num_hidden_layers: -1 }, 'field "mtp_num_hidden_layers"', 'non-negative integer');
  configError({ ...next, num_nextn_predict_layers: 'one' }, 'field "num_nextn_predict_layers"');
});

test('transformers defaults: layer_types from full_attention_interval, partial_rotary_factor 0.25, head_dim 256', () => {
  const { layer_types: _, rope_parameters: __, head_dim: ___, ...rest } = tiny;
  const c = parseModelConfig({ ...rest, num_hidden_layers: 6, full_attention_interval: 3, rope_theta: 500 }, 'c');
  assert.deepEqual(c.hybrid!.layerTypes, ['linear_attention', 'linear_attention', 'full_attention',
    'linear_attention', 'linear_attention', 'full_attention']);
  assert.equal(c.headDim, 256);
  assert.equal(c.hybrid!.rotaryDim, 64);
  assert.equal(c.ropeTheta, 500);
  // the legacy top-level partial_rotary_factor
  assert.equal(parseModelConfig({ ...rest, partial_rotary_factor: 0.5 }, 'c').hybrid!.rotaryDim, 128);
  // the default interval is 4
  assert.deepEqual(parseModelConfig({ ...rest }, 'c').hybrid!.layerTypes, ['linear_attention', 'linear_attention', 'linear_attention', 'full_attention']);
});

test('a nested config takes the dtype and tying from the top where text_config leaves them out', () => {
  const { dtype: _, tie_word_embeddings: __, ...text } = (shapes['qwen3.5-27b']!.text_config as Record<string, unknown>);
  const c = parseModelConfig({ ...shapes['qwen3.5-27b'], torch_dtype: 'float32', tie_word_embeddings: true, text_config: text }, 'c');
  assert.equal(c.dtype, 'f32');
  assert.equal(c.tieWordEmbeddings, true);
});

test('refused, naming the field: experts in a dense config, quantized checkpoints, rope scaling, bad layer_types', () => {
  configError({ ...tiny, num_experts: 256 }, 'field "num_experts"', 'dense Qwen3.5 config', 'Qwen3_5MoeForCausalLM');
  configError({ ...tiny, shared_expert_intermediate_size: 512 }, 'field "shared_expert_intermediate_size"', 'qwen3_5_moe_text');
  configError({ ...shapes['qwen3.5-27b'], quantization_config: { quant_method: 'fp8' } }, 'field "quantization_config"', 'bf16');
  configError({ ...tiny, rope_parameters: { rope_type: 'yarn', factor: 4 } }, 'field "rope_parameters.rope_type"', 'yarn');
  configError({ ...tiny, layer_types: ['linear_attention', 'full_attention'] }, 'field "layer_types"', 'must list 4');
  configError({ ...tiny, layer_types: Array(4).fill('linear_attention') }, 'no full_attention layer');
  configError({ ...tiny, linear_num_value_heads: 3 }, 'field "linear_num_value_heads"', 'multiple of linear_num_key_heads');
  configError({ ...tiny, attention_bias: true }, 'field "attention_bias"');
  configError({ ...shapes['qwen3.5-27b'], text_config: { ...(shapes['qwen3.5-27b']!.text_config as object), hidden_size: 0 } },
    'field "text_config.hidden_size"');
});
