import { readFileSync } from 'node:fs';
import { ModelLoadError, describeError } from './errors.js';
import type { Architecture, FloatDType, Fp8BlockQuantization, ModelConfig, RopeScaling } from './types.js';
import { parseMoeConfig } from './moe-config.js';
import { isHybridArchitecture, parseHybridConfig } from './hybrid-config.js';

/** config.json architectures -> the family whose fields parseModelConfig reads (src/model/registry.ts builds each). */
export const ARCHITECTURES: Readonly<Record<string, Architecture>> = {
  Qwen3ForCausalLM: 'qwen3',
  Qwen2ForCausalLM: 'qwen2',
  LlamaForCausalLM: 'llama',
  MistralForCausalLM: 'mistral',
  Phi3ForCausalLM: 'phi3',
  Qwen3MoeForCausalLM: 'qwen3_moe',
  MixtralForCausalLM: 'mixtral',
  // the text model alone, and (the published checkpoints) with its vision tower, which Quire leaves unread
  Qwen3_5ForCausalLM: 'qwen3_5',
  Qwen3_5ForConditionalGeneration: 'qwen3_5',
  Qwen3_5MoeForCausalLM: 'qwen3_5_moe',
  Qwen3_5MoeForConditionalGeneration: 'qwen3_5_moe',
  Qwen3NextForCausalLM: 'qwen3_next',
};

const MODEL_TYPES: Record<string, Architecture> = { qwen3: 'qwen3', qwen2: 'qwen2', llama: 'llama', mistral: 'mistral', phi3: 'phi3',
  qwen3_moe: 'qwen3_moe', mixtral: 'mixtral', qwen3_5: 'qwen3_5', qwen3_5_text: 'qwen3_5', qwen3_5_moe: 'qwen3_5_moe',
  qwen3_5_moe_text: 'qwen3_5_moe', qwen3_next: 'qwen3_next' };

const DTYPES: Record<string, FloatDType> = { bfloat16: 'bf16', float16: 'f16', float32: 'f32', bf16: 'bf16', f16: 'f16', f32: 'f32' };

type Json = Record<string, unknown>;

class FieldReader {
  constructor(
    private readonly json: Json,
    private readonly file: string,
    private readonly prefix = '',
  ) {}

  fail(field: string, problem: string): never {
    throw new ModelLoadError(this.file, `field "${this.prefix}${field}" ${problem}`);
  }

  has(field: string): boolean {
    return this.json[field] !== undefined && this.json[field] !== null;
  }

  positiveInt(field: string, fallback?: number): number {
    const v = this.json[field];
    if (v === undefined || v === null) {
      if (fallback !== undefined) return fallback;
      this.fail(field, 'is missing');
    }
    if (typeof v !== 'number' || !Number.isSafeInteger(v) || v <= 0) this.fail(field, `must be a positive integer, got ${JSON.stringify(v)}`);
    return v;
  }

  positiveNumber(field: string, fallback?: number): number {
    const v = this.json[field];
    if (v === undefined || v === null) {
      if (fallback !== undefined) return fallback;
      this.fail(field, 'is missing');
    }
    if (typeof v !== 'number' || !Number.isFinite(v) || v <= 0) this.fail(field, `must be a positive number, got ${JSON.stringify(v)}`);
    return v;
  }

  boolean(field: string, fallback: boolean): boolean {
    const v = this.json[field];
    if (v === undefined || v === null) return fallback;
    if (typeof v !== 'boolean') this.fail(field, `must be true or false, got ${JSON.stringify(v)}`);
    return v;
  }
}

function parseArchitecture(json: Json, r: FieldReader): Architecture {
  const archs = json.architectures;
  if (archs !== undefined) {
    if (!Array.isArray(archs) || archs.length === 0 || typeof archs[0] !== 'string') {
      r.fail('architectures', `must be a list of class names, got ${JSON.stringify(archs)}`);
    }
    const arch = ARCHITECTURES[archs[0]];
    if (arch === undefined) {
      r.fail('architectures', `names ${archs[0]}, which is not supported (supported: ${Object.keys(ARCHITECTURES).join(', ')})`);
    }
    return arch;
  }
  const modelType = json.model_type;
  if (typeof modelType !== 'string') r.fail('architectures', 'is missing (and so is model_type)');
  const arch = MODEL_TYPES[modelType];
  if (arch === undefined) r.fail('model_type', `is ${modelType}, which is not supported (supported: ${Object.keys(MODEL_TYPES).join(', ')})`);
  return arch;
}

/** HF's yarn get_mscale: 1 at or below scale 1. */
function yarnMscale(scale: number, mscale = 1): number {
  return scale <= 1 ? 1 : 0.1 * mscale * Math.log(scale) + 1;
}

function parseRopeScaling(raw: unknown, file: string, maxPositionEmbeddings: number): RopeScaling | null {
  if (raw === undefined || raw === null) return null;
  if (typeof raw !== 'object' || Array.isArray(raw)) {
    throw new ModelLoadError(file, `field "rope_scaling" must be an object or null, got ${JSON.stringify(raw)}`);
  }
  const json = raw as Json;
  const ropeType = json.rope_type ?? json.type;
  if (ropeType === 'default') return null;
  const r = new FieldReader(json, file, 'rope_scaling.');
  if (ropeType === 'linear') return { type: 'linear', factor: r.positiveNumber('factor') };
  if (ropeType === 'yarn') {
    // As vLLM: the factor is rope_scaling's (transformers derives it from max_position_embeddings instead when
    // original_max_position_embeddings is given; the two agree where max_position_embeddings = factor x original).
    const factor = r.positiveNumber('factor');
    const mscale = r.has('mscale') ? r.positiveNumber('mscale') : 0;
    const mscaleAllDim = r.has('mscale_all_dim') ? r.positiveNumber('mscale_all_dim') : 0;
    const attentionFactor = r.has('attention_factor') ? r.positiveNumber('attention_factor')
      : mscale && mscaleAllDim ? yarnMscale(factor, mscale) / yarnMscale(factor, mscaleAllDim) : yarnMscale(factor);
    return {
      type: 'yarn', factor, attentionFactor,
      originalMaxPositionEmbeddings: r.positiveInt('original_max_position_embeddings', maxPositionEmbeddings),
      betaFast: r.positiveNumber('beta_fast', 32),
      betaSlow: r.positiveNumber('beta_slow', 1),
      truncate: r.boolean('truncate', true),
    };
  }
  if (ropeType !== 'llama3') {
    throw new ModelLoadError(file, `field "rope_scaling.rope_type" is ${JSON.stringify(ropeType)}, which is not supported (supported: llama3, yarn, linear, default)`);
  }
  const scaling: RopeScaling = {
    type: 'llama3',
    factor: r.positiveNumber('factor'),
    lowFreqFactor: r.positiveNumber('low_freq_factor'),
    highFreqFactor: r.positiveNumber('high_freq_factor'),
    originalMaxPositionEmbeddings: r.positiveInt('original_max_position_embeddings'),
  };
  if (scaling.highFreqFactor <= scaling.lowFreqFactor) {
    r.fail('high_freq_factor', `(${scaling.highFreqFactor}) must be larger than low_freq_factor (${scaling.lowFreqFactor})`);
  }
  return scaling;
}

function parseDType(json: Json, r: FieldReader): FloatDType {
  const raw = json.torch_dtype ?? json.dtype;
  if (raw === undefined || raw === null) return 'bf16';
  const dtype = typeof raw === 'string' ? DTYPES[raw] : undefined;
  if (dtype === undefined) {
    r.fail(json.torch_dtype !== undefined ? 'torch_dtype' : 'dtype', `is ${JSON.stringify(raw)}, which is not supported (bfloat16, float16, float32)`);
  }
  return dtype;
}

const SERVED = "Quire serves bf16/f16/f32 checkpoints and block-FP8 ('fp8' with weight_block_size [128, 128])";

/**
 * quantization_config -> block FP8, or null where there is none. Only what vLLM's Fp8Config runs as block-wise
 * quantization is accepted: an fp8-serialized e4m3 checkpoint, 128 x 128 weight blocks, dynamic activation scales.
 */
function parseQuantization(raw: unknown, file: string): Fp8BlockQuantization | null {
  if (raw === undefined || raw === null) return null;
  if (typeof raw !== 'object' || Array.isArray(raw)) {
    throw new ModelLoadError(file, `field "quantization_config" must be an object or null, got ${JSON.stringify(raw)}`);
  }
  const json = raw as Json;
  const r = new FieldReader(json, file, 'quantization_config.');
  const { quant_method: method, fmt, activation_scheme: scheme, weight_block_size: block } = json;
  if (method !== 'fp8') {
    r.fail('quant_method', `${method === undefined ? 'is missing' : `is ${JSON.stringify(method)}, which is not supported`}; ${SERVED}`);
  }
  if (fmt !== undefined && fmt !== null && fmt !== 'e4m3') r.fail('fmt', `is ${JSON.stringify(fmt)}; only e4m3 FP8 is supported`);
  // transformers' FineGrainedFP8Config writes it; its default is dynamic
  if (scheme !== undefined && scheme !== null && scheme !== 'dynamic') {
    r.fail('activation_scheme', `is ${JSON.stringify(scheme)}; block-wise FP8 quantization supports only the dynamic activation scheme`);
  }
  if (block === undefined || block === null) {
    r.fail('weight_block_size', 'is missing: a per-tensor FP8 checkpoint; only block-wise FP8 (weight_block_size [128, 128]) is supported');
  }
  if (!Array.isArray(block) || block.length !== 2 || block[0] !== 128 || block[1] !== 128) {
    r.fail('weight_block_size', `is ${JSON.stringify(block)}; only block-wise FP8 with weight_block_size [128, 128] is supported`);
  }
  // transformers writes modules_to_not_convert; vLLM's Fp8Config reads ignored_layers: either (or both) keep modules
  const skip = (['modules_to_not_convert', 'ignored_layers'] as const).flatMap((key) => {
    const names: unknown = json[key] ?? [];
    if (!Array.isArray(names) || !names.every((m) => typeof m === 'string')) {
      r.fail(key, `must be a list of module names, got ${JSON.stringify(names)}`);
    }
    return names as string[];
  });
  return { method: 'fp8', weightBlockSize: [128, 128], modulesToNotConvert: skip };
}

/**
 * Whether projection `module` (e.g. model.layers.0.self_attn.q_proj) is block FP8: quantized unless an entry of
 * modules_to_not_convert names whole dot-separated parts of it ("lm_head", "q_proj", "model.layers.0").
 */
export function fp8Module(config: Pick<ModelConfig, 'quantization'>, module: string): boolean {
  const q = config.quantization;
  return q !== null && !q.modulesToNotConvert.some((m) => `.${module}.`.includes(`.${m}.`));
}

/** Projections Quire fuses (q, k, v; gate, up) must share a precision, as vLLM requires of its fused layers. */
function checkFusedPrecision(config: Pick<ModelConfig, 'quantization' | 'numLayers'>, r: FieldReader): void {
  for (let l = 0; l < config.numLayers; l++) {
    for (const [parent, names] of [['self_attn', ['q_proj', 'k_proj', 'v_proj']], ['mlp', ['gate_proj', 'up_proj']]] as const) {
      const modules = names.map((n) => `model.layers.${l}.${parent}.${n}`);
      if (new Set(modules.map((m) => fp8Module(config, m))).size > 1) {
        r.fail('quantization_config.modules_to_not_convert', `(or ignored_layers) names some but not all of ${modules.join(', ')}; ` +
          'Quire fuses them into one weight, so they must all be FP8 or all not');
      }
    }
  }
}

/**
 * The sliding window a config applies, or null: Qwen2 and Qwen3 name one but use it only with use_sliding_window;
 * Mistral and Phi-3 whenever it is set. (Quire holds the context to it: ModelConfig.slidingWindow.)
 */
function slidingWindowOf(architecture: Architecture, r: FieldReader): number | null {
  if ((architecture === 'qwen2' || architecture === 'qwen3' || architecture === 'qwen3_moe' || isHybridArchitecture(architecture)) &&
    !r.boolean('use_sliding_window', false)) return null;
  return r.has('sliding_window') ? r.positiveInt('sliding_window') : null;
}

/** config.json -> ModelConfig; file is only used in error messages. */
export function parseModelConfig(json: unknown, file: string): ModelConfig {
  if (typeof json !== 'object' || json === null || Array.isArray(json)) {
    throw new ModelLoadError(file, 'is not a JSON object');
  }
  const architecture = parseArchitecture(json as Json, new FieldReader(json as Json, file));
  // a hybrid model's text fields (nested under text_config where the checkpoint carries a vision tower)
  const hybrid = isHybridArchitecture(architecture) ? parseHybridConfig(json as Json, file, architecture) : null;
  const obj = hybrid?.json ?? json as Json;
  const r = new FieldReader(obj, file, hybrid?.prefix ?? '');
  const hiddenSize = r.positiveInt('hidden_size');
  const numHeads = r.positiveInt('num_attention_heads');
  const numKvHeads = r.positiveInt('num_key_value_heads', numHeads);
  if (numHeads % numKvHeads !== 0) {
    r.fail('num_key_value_heads', `(${numKvHeads}) must divide num_attention_heads (${numHeads})`);
  }
  let headDim: number;
  if (r.has('head_dim')) {
    headDim = r.positiveInt('head_dim');
  } else {
    if (hiddenSize % numHeads !== 0) r.fail('head_dim', `is missing and hidden_size (${hiddenSize}) is not a multiple of num_attention_heads (${numHeads})`);
    headDim = hiddenSize / numHeads;
  }
  if (headDim % 2 !== 0) r.fail('head_dim', `(${headDim}) must be even for RoPE`);
  // As transformers: Qwen2 always has q, k and v biases (its config has no attention_bias), Llama and Qwen3 put
  // attention_bias on q, k, v and o, Mistral and Phi-3 have none.
  const attentionBias = architecture === 'qwen2' ||
    ((architecture === 'llama' || architecture === 'qwen3' || architecture === 'qwen3_moe') && r.boolean('attention_bias', false));
  if (r.boolean('mlp_bias', false)) r.fail('mlp_bias', 'is true; MLP biases are not supported');
  if (r.has('partial_rotary_factor') && r.positiveNumber('partial_rotary_factor') !== 1) {
    r.fail('partial_rotary_factor', `is ${JSON.stringify(obj.partial_rotary_factor)}; only a rotation of the whole head (1) is supported`);
  }
  const maxPositionEmbeddings = r.positiveInt('max_position_embeddings');
  const act = obj.hidden_act;
  if (act !== undefined && act !== 'silu') r.fail('hidden_act', `is ${JSON.stringify(act)}; only silu is supported`);
  const quantization = parseQuantization(obj.quantization_config, file);
  const numLayers = r.positiveInt('num_hidden_layers');
  if (quantization && attentionBias) {
    r.fail('quantization_config', `is block FP8 on a model with attention biases (${architecture === 'qwen2'
      ? 'Qwen2 has q, k and v biases' : 'attention_bias is true'}); FP8 projections with biases are not supported`);
  }
  if (quantization && architecture !== 'phi3') checkFusedPrecision({ quantization, numLayers }, r);
  const intermediateSize = r.positiveInt('intermediate_size');
  return {
    architecture,
    vocabSize: r.positiveInt('vocab_size'),
    hiddenSize,
    intermediateSize,
    numLayers,
    numHeads,
    numKvHeads,
    headDim,
    maxPositionEmbeddings,
    rmsNormEps: r.positiveNumber('rms_norm_eps', 1e-6),
    ropeTheta: r.positiveNumber('rope_theta', 10000),
    ropeScaling: parseRopeScaling(obj.rope_scaling, file, maxPositionEmbeddings),
    tieWordEmbeddings: r.boolean('tie_word_embeddings', false),
    qkNorm: architecture === 'qwen3' || architecture === 'qwen3_moe' || isHybridArchitecture(architecture),
    qkvBias: attentionBias,
    oBias: attentionBias && architecture !== 'qwen2',
    slidingWindow: slidingWindowOf(architecture, r),
    fusedProjections: architecture === 'phi3',
    dtype: parseDType(obj, r),
    quantization,
    moe: parseMoeConfig(architecture, obj, file, numLayers, intermediateSize, hybrid?.prefix ?? ''),
    hybrid: hybrid?.hybrid ?? null,
  };
}

/** config.json, with `overrides`' fields in place of its own (vLLM's --hf-overrides), -> ModelConfig. */
export function loadModelConfig(file: string, overrides: Record<string, unknown> | null = null): ModelConfig {
  let json: unknown;
  try {
    json = JSON.parse(readFileSync(file, 'utf8'));
  } catch (err) {
    throw new ModelLoadError(file, `cannot read: ${describeError(err)}`, { cause: err });
  }
  if (!overrides || typeof json !== 'object' || json === null || Array.isArray(json)) return parseModelConfig(json, file);
  return parseModelConfig({ ...json, ...overrides }, `${file} with --hf-overrides`);
}
