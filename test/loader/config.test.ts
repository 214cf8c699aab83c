import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fp8Module, loadModelConfig, parseModelConfig } from '../../src/loader/config.js';
import { ModelLoadError } from '../../src/loader/errors.js';
import { repoRoot, tempDir } from './helpers.js';

const shapes = JSON.parse(readFileSync(join(repoRoot(), 'bench', 'shapes.json'), 'utf8')) as Record<string, Record<string, unknown>>;

function configError(json: unknown, ...parts: string[]): void {
  assert.throws(
    () => parseModelConfig(json, '/models/x/config.json'),
    (err: unknown) => {
      assert.ok(err instanceof ModelLoadError, String(err));
      assert.ok(err.message.startsWith('config.json: '), err.message);
      for (const p of parts) assert.ok(err.message.includes(p), `"${err.message}" lacks "${p}"`);
      return true;
    },
  );
}

test('qwen3: every field normalised, qk norm on, head_dim given', () => {
  const c = parseModelConfig(shapes['qwen3-8b'], 'config.json');
  assert.deepEqual(c, {
    architecture: 'qwen3',
    vocabSize: 151936,
    hiddenSize: 4096,
    intermediateSize: 12288,
    numLayers: 36,
    numHeads: 32,
    numKvHeads: 8,
    headDim: 128,
    maxPositionEmbeddings: 40960,
    rmsNormEps: 1e-6,
    ropeTheta: 1000000,
    ropeScaling: null,
    tieWordEmbeddings: false,
    qkNorm: true,
    qkvBias: false,
    oBias: false,
    slidingWindow: null,
    fusedProjections: false,
    dtype: 'bf16',
    quantization: null,
    moe: null,
    hybrid: null,
  });
  assert.equal(parseModelConfig(shapes['qwen3-0.6b'], 'config.json').tieWordEmbeddings, true);
});

test('llama: llama3 rope scaling parsed (rope_type or legacy type), qk norm off', () => {
  const c = parseModelConfig(shapes['llama-3.1-8b'], 'config.json');
  assert.equal(c.architecture, 'llama');
  assert.equal(c.qkNorm, false);
  assert.deepEqual(c.ropeScaling, { type: 'llama3', factor: 8, lowFreqFactor: 1, highFreqFactor: 4, originalMaxPositionEmbeddings: 8192 });
  const { rope_type: _, ...rest } = shapes['llama-3.2-1b']!.rope_scaling as Record<string, unknown>;
  const legacy = parseModelConfig({ ...shapes['llama-3.2-1b'], rope_scaling: { ...rest, type: 'llama3' } }, 'config.json');
  assert.equal(legacy.ropeScaling?.factor, 32);
  assert.equal(parseModelConfig({ ...shapes['llama-3.2-1b'], rope_scaling: { rope_type: 'default' } }, 'c').ropeScaling, null);
  assert.equal(parseModelConfig({ ...shapes['llama-3.2-1b'], rope_scaling: null }, 'c').ropeScaling, null);
});

test('defaults: head_dim derived, kv heads = heads, tie false, dtype bf16, eps and theta', () => {
  const minimal = {
    architectures: ['LlamaForCausalLM'],
    hidden_size: 96,
    intermediate_size: 256,
    num_hidden_layers: 2,
    num_attention_heads: 6,
    vocab_size: 300,
    max_position_embeddings: 128,
  };
  const c = parseModelConfig(minimal, 'config.json');
  assert.equal(c.headDim, 16);
  assert.equal(c.numKvHeads, 6);
  assert.equal(c.tieWordEmbeddings, false);
  assert.equal(c.dtype, 'bf16');
  assert.equal(c.rmsNormEps, 1e-6);
  assert.equal(c.ropeTheta, 10000);
  assert.equal(parseModelConfig({ ...minimal, dtype: 'float16' }, 'c').dtype, 'f16');
  assert.equal(parseModelConfig({ ...minimal, torch_dtype: 'float32', dtype: 'float16' }, 'c').dtype, 'f32');
  assert.equal(parseModelConfig({ ...minimal, architectures: undefined, model_type: 'qwen3' }, 'c').architecture, 'qwen3');
});

test('qwen2, mistral, phi3 and attention_bias: biases where transformers puts them, sliding windows where they apply', () => {
  const qwen2 = { ...shapes['qwen3-0.6b'], architectures: ['Qwen2ForCausalLM'], model_type: 'qwen2', use_sliding_window: false, sliding_window: 32768 };
  const q = parseModelConfig(qwen2, 'config.json');
  assert.deepEqual([q.architecture, q.qkvBias, q.oBias, q.qkNorm], ['qwen2', true, false, false]);
  assert.equal(q.slidingWindow, null, 'named, but use_sliding_window is off');
  assert.equal(parseModelConfig({ ...qwen2, use_sliding_window: true }, 'c').slidingWindow, 32768);
  const llamaBias = parseModelConfig({ ...shapes['llama-3.2-1b'], attention_bias: true }, 'config.json');
  assert.deepEqual([llamaBias.qkvBias, llamaBias.oBias], [true, true]);
  const plain = parseModelConfig(shapes['llama-3.2-1b'], 'config.json');
  assert.deepEqual([plain.qkvBias, plain.oBias], [false, false]);
  const mistral = { ...shapes['llama-3.2-1b'], rope_scaling: null, architectures: ['MistralForCausalLM'], model_type: 'mistral', sliding_window: null };
  const m = parseModelConfig({ ...mistral, attention_bias: true }, 'config.json');
  assert.deepEqual([m.architecture, m.qkvBias, m.oBias, m.qkNorm], ['mistral', false, false, false]);
  assert.equal(m.slidingWindow, null);
  assert.equal(parseModelConfig({ ...mistral, sliding_window: 4096 }, 'c').slidingWindow, 4096, 'Mistral 7B v0.1');
  configError({ ...mistral, sliding_window: 0 }, '"sliding_window" must be a positive integer');
  const phi3 = { ...mistral, architectures: ['Phi3ForCausalLM'], model_type: 'phi3', sliding_window: 2047 };
  const p = parseModelConfig(phi3, 'c');
  assert.deepEqual([p.architecture, p.fusedProjections, p.slidingWindow, p.qkvBias], ['phi3', true, 2047, false]);
  assert.equal(m.fusedProjections, false);
  configError({ ...phi3, partial_rotary_factor: 0.75 }, '"partial_rotary_factor" is 0.75', 'whole head');
  assert.equal(parseModelConfig({ ...phi3, partial_rotary_factor: 1.0 }, 'c').architecture, 'phi3');
  assert.equal(parseModelConfig({ ...mistral, architectures: undefined }, 'c').architecture, 'mistral');
  assert.equal(parseModelConfig({ ...qwen2, architectures: undefined }, 'c').architecture, 'qwen2');
});

test('yarn (as Qwen3 and Qwen2.5 document it) and linear rope scaling', () => {
  const c = parseModelConfig({ ...shapes['qwen3-8b'], rope_scaling: { rope_type: 'yarn', factor: 4.0,
    original_max_position_embeddings: 32768 } }, 'config.json');
  assert.deepEqual(c.ropeScaling, { type: 'yarn', factor: 4, originalMaxPositionEmbeddings: 32768, betaFast: 32,
    betaSlow: 1, attentionFactor: 0.1 * Math.log(4) + 1, truncate: true });
  const deepseek = parseModelConfig({ ...shapes['qwen3-8b'], rope_scaling: { type: 'yarn', factor: 40, mscale: 1,
    mscale_all_dim: 1, beta_fast: 16, beta_slow: 2 } }, 'config.json').ropeScaling;
  assert.deepEqual(deepseek, { type: 'yarn', factor: 40, originalMaxPositionEmbeddings: 40960, betaFast: 16, betaSlow: 2,
    attentionFactor: 1, truncate: true });
  const given = parseModelConfig({ ...shapes['qwen3-8b'], rope_scaling: { type: 'yarn', factor: 2, attention_factor: 1.5 } }, 'c');
  assert.equal(given.ropeScaling?.type === 'yarn' && given.ropeScaling.attentionFactor, 1.5);
  assert.deepEqual(parseModelConfig({ ...shapes['llama-3.2-1b'], rope_scaling: { type: 'linear', factor: 2 } }, 'c').ropeScaling,
    { type: 'linear', factor: 2 });
});

test('unknown architecture or rope type: error names the file and field', () => {
  configError({ ...shapes['qwen3-8b'], architectures: ['GemmaForCausalLM'] }, '"architectures"', 'GemmaForCausalLM', 'not supported');
  configError({ ...shapes['qwen3-30b-a3b'], architectures: ['Qwen2MoeForCausalLM'] }, 'Qwen2MoeForCausalLM', 'not supported');
  configError({ ...shapes['qwen3-8b'], architectures: undefined, model_type: undefined }, '"architectures" is missing');
  configError({ ...shapes['llama-3.1-8b'], rope_scaling: { rope_type: 'dynamic', factor: 4 } }, '"rope_scaling.rope_type"', 'dynamic');
  configError({ ...shapes['qwen3-8b'], rope_scaling: { rope_type: 'yarn' } }, '"rope_scaling.factor" is missing');
  configError({ ...shapes['llama-3.1-8b'], rope_scaling: { rope_type: 'llama3', factor: 8 } }, '"rope_scaling.low_freq_factor" is missing');
});

test('missing or invalid fields', () => {
  const base = shapes['qwen3-0.6b']!;
  configError({ ...base, hidden_size: undefined }, 'field "hidden_size" is missing');
  configError({ ...base, num_attention_heads: '16' }, 'field "num_attention_heads" must be a positive integer, got "16"');
  configError({ ...base, num_hidden_layers: 0 }, '"num_hidden_layers"');
  configError({ ...base, num_key_value_heads: 5 }, '"num_key_value_heads" (5) must divide num_attention_heads (16)');
  configError({ ...base, head_dim: undefined, hidden_size: 1000 }, '"head_dim" is missing');
  configError({ ...base, tie_word_embeddings: 'yes' }, '"tie_word_embeddings"');
  configError({ ...base, torch_dtype: 'int8' }, '"torch_dtype"', 'int8');
  configError({ ...base, mlp_bias: true }, '"mlp_bias"', 'not supported');
  configError({ ...base, hidden_act: 'gelu' }, '"hidden_act"');
  configError([1], 'not a JSON object');
});

// Qwen3-8B-FP8's quantization_config, as published
const QWEN3_FP8 = { activation_scheme: 'dynamic', fmt: 'e4m3', quant_method: 'fp8', weight_block_size: [128, 128] };

test('block FP8: Qwen3-FP8\'s quantization_config parsed; fmt and modules_to_not_convert optional', () => {
  const c = parseModelConfig({ ...shapes['qwen3-8b'], quantization_config: QWEN3_FP8 }, 'config.json');
  assert.deepEqual(c.quantization, { method: 'fp8', weightBlockSize: [128, 128], modulesToNotConvert: [] });
  assert.equal(c.dtype, 'bf16', 'embeddings, norms and lm_head stay in torch_dtype');
  const { fmt: _, ...noFmt } = QWEN3_FP8;
  const lmHead = parseModelConfig({ ...shapes['qwen3-0.6b'], quantization_config: { ...noFmt, modules_to_not_convert: ['lm_head'] } }, 'c');
  assert.deepEqual(lmHead.quantization?.modulesToNotConvert, ['lm_head']);
  assert.equal(parseModelConfig({ ...shapes['qwen3-8b'], quantization_config: null }, 'c').quantization, null);
});

test('block FP8: modules_to_not_convert keeps whole named modules in torch_dtype; fused ones must agree', () => {
  const config = (skip: string[]) => parseModelConfig({ ...shapes['qwen3-8b'], quantization_config: { ...QWEN3_FP8, modules_to_not_convert: skip } }, 'c');
  const c = config(['lm_head', 'o_proj', 'model.layers.1.mlp']);
  assert.equal(fp8Module(c, 'model.layers.0.self_attn.q_proj'), true);
  assert.equal(fp8Module(c, 'model.layers.0.self_attn.o_proj'), false);
  assert.equal(fp8Module(c, 'model.layers.1.mlp.down_proj'), false);
  assert.equal(fp8Module(c, 'model.layers.10.mlp.down_proj'), true, 'whole parts only: layers.1 is not layers.10');
  assert.equal(fp8Module(parseModelConfig(shapes['qwen3-8b'], 'c'), 'model.layers.0.self_attn.q_proj'), false, 'no quantization');
  configError({ ...shapes['qwen3-8b'], quantization_config: { ...QWEN3_FP8, modules_to_not_convert: ['model.layers.3.self_attn.k_proj'] } },
    '"quantization_config.modules_to_not_convert" (or ignored_layers) names some but not all of model.layers.3.self_attn.q_proj, model.layers.3.self_attn.k_proj');
  configError({ ...shapes['qwen3-8b'], quantization_config: { ...QWEN3_FP8, modules_to_not_convert: ['up_proj'] } }, 'gate_proj');
  configError({ ...shapes['qwen3-8b'], quantization_config: { ...QWEN3_FP8, modules_to_not_convert: 'lm_head' } },
    '"quantization_config.modules_to_not_convert" must be a list of module names');
});
test('block FP8: vLLM\'s ignored_layers keeps modules as modules_to_not_convert does, the two together', () => {
  const config = (q: object) => parseModelConfig({ ...shapes['qwen3-8b'], quantization_config: { ...QWEN3_FP8, ...q } }, 'c');
  const c = config({ ignored_layers: ['lm_head', 'model.layers.0.mlp.down_proj'], modules_to_not_convert: ['o_proj'] });
  assert.deepEqual(c.quantization?.modulesToNotConvert, ['o_proj', 'lm_head', 'model.layers.0.mlp.down_proj']);
  assert.equal(fp8Module(c, 'model.layers.0.mlp.down_proj'), false);
  assert.equal(fp8Module(c, 'model.layers.1.mlp.down_proj'), true);
  assert.equal(fp8Module(c, 'model.layers.5.self_attn.o_proj'), false);
  configError({ ...shapes['qwen3-8b'], quantization_config: { ...QWEN3_FP8, ignored_layers: 'lm_head' } },
    '"quantization_config.ignored_layers" must be a list of module names');
  configError({ ...shapes['qwen3-8b'], quantization_config: { ...QWEN3_FP8, ignored_layers: ['model.layers.2.mlp.up_proj'] } },
    '(or ignored_layers) names some but not all of model.layers.2.mlp.gate_proj, model.layers.2.mlp.up_proj');
});


test('quantization other than block FP8 is refused naming the field and what is served', () => {
  const base = shapes['qwen3-8b']!;
  const refused = (quantization: unknown, ...parts: string[]) => configError({ ...base, quantization_config: quantization }, ...parts);
  refused({ quant_method: 'awq', bits: 4 }, 'field "quantization_config.quant_method" is "awq", which is not supported',
    "Quire serves bf16/f16/f32 checkpoints and block-FP8 ('fp8' with weight_block_size [128, 128])");
  refused({ quant_method: 'compressed-tensors' }, '"quantization_config.quant_method" is "compressed-tensors"');
  refused({ bits: 4 }, '"quantization_config.quant_method" is missing');
  refused({ ...QWEN3_FP8, fmt: 'e5m2' }, '"quantization_config.fmt" is "e5m2"', 'only e4m3');
  refused({ ...QWEN3_FP8, activation_scheme: 'static' }, '"quantization_config.activation_scheme" is "static"', 'only the dynamic activation scheme');
  const { weight_block_size: _, ...perTensor } = QWEN3_FP8;
  refused(perTensor, '"quantization_config.weight_block_size" is missing', 'per-tensor', 'only block-wise FP8');
  refused({ ...QWEN3_FP8, weight_block_size: [64, 64] }, '"quantization_config.weight_block_size" is [64,64]', '[128, 128]');
  refused({ ...QWEN3_FP8, weight_block_size: [128] }, '"quantization_config.weight_block_size" is [128]');
  refused('fp8', '"quantization_config" must be an object or null');
});

test('block FP8 with attention biases (Qwen2-FP8, attention_bias) is refused naming them', () => {
  const qwen2 = { ...shapes['qwen2.5-7b'], quantization_config: QWEN3_FP8 };
  configError(qwen2, 'field "quantization_config" is block FP8 on a model with attention biases', 'Qwen2 has q, k and v biases');
  configError({ ...shapes['llama-3.1-8b'], attention_bias: true, quantization_config: QWEN3_FP8 }, 'attention_bias is true');
  assert.ok(parseModelConfig({ ...shapes['llama-3.1-8b'], quantization_config: QWEN3_FP8 }, 'c').quantization);
});

test('--hf-overrides: quantization_config is one more top-level field (kept, replaced, or refused as the file\'s)', () => {
  const file = join(tempDir(), 'config.json');
  writeFileSync(file, JSON.stringify({ ...shapes['qwen3-8b'], quantization_config: QWEN3_FP8 }));
  const yarn = { rope_scaling: { rope_type: 'yarn', factor: 4, original_max_position_embeddings: 32768 } };
  const c = loadModelConfig(file, yarn);
  assert.deepEqual([c.quantization?.method, c.ropeScaling?.type], ['fp8', 'yarn']);
  const lmHead = loadModelConfig(file, { quantization_config: { ...QWEN3_FP8, modules_to_not_convert: ['lm_head'] } });
  assert.deepEqual(lmHead.quantization?.modulesToNotConvert, ['lm_head']);
  assert.throws(() => loadModelConfig(file, { quantization_config: { ...QWEN3_FP8, activation_scheme: 'static' } }),
    /^ModelLoadError: config\.json with --hf-overrides: field "quantization_config\.activation_scheme" is "static"/);
});
