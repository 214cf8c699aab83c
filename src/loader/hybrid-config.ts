// The fields of the hybrid linear-attention families as transformers 5.x reads them: Qwen3.5 / Qwen3.6
// (Qwen3_5TextConfig, model_type qwen3_5_text), their mixture-of-experts variant (Qwen3_5MoeTextConfig,
// qwen3_5_moe_text) and Qwen3-Next (Qwen3NextConfig, qwen3_next), whose hybrid fields and defaults they share. A
// Qwen3.5 checkpoint published with its vision tower (Qwen3_5ForConditionalGeneration / Qwen3_5MoeForConditional-
// Generation, model_type qwen3_5 / qwen3_5_moe) nests the text model's fields under text_config; Quire serves that
// text model. What parseModelConfig reads in common with the other families (sizes, eps, vocabulary, dtype) is handed
// back flattened; what only a hybrid model has (layer_types, the linear_* DeltaNet sizes, the partial rotary) becomes
// HybridConfig; the experts' fields are moe-config.ts's. What Quire does not run is refused here, naming the field.

import { ModelLoadError } from './errors.js';
import type { Architecture, HybridArchitecture, HybridConfig, LayerType } from './types.js';

type Json = Record<string, unknown>;

const LAYER_TYPES: readonly LayerType[] = ['linear_attention', 'full_attention'];

/** Each family's name in messages and its text model's model_type. */
const FAMILIES: Readonly<Record<HybridArchitecture, { name: string; textModelType: string }>> = {
  qwen3_5: { name: 'Qwen3.5', textModelType: 'qwen3_5_text' },
  qwen3_5_moe: { name: 'Qwen3.5-MoE', textModelType: 'qwen3_5_moe_text' },
  qwen3_next: { name: 'Qwen3-Next', textModelType: 'qwen3_next' },
};

export function isHybridArchitecture(a: Architecture): a is HybridArchitecture {
  return a in FAMILIES;
}

/** The family's name in messages: Qwen3.5, Qwen3.5-MoE, Qwen3-Next. */
export function hybridFamilyName(a: HybridArchitecture): string {
  return FAMILIES[a].name;
}

function isObject(v: unknown): v is Json {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/**
 * config.json of a hybrid checkpoint -> the text model's fields, flattened for parseModelConfig (`json`, whose errors
 * name fields under `prefix`), and its hybrid fields.
 */
export function parseHybridConfig(top: Json, file: string, architecture: HybridArchitecture): { json: Json; prefix: string;
  hybrid: HybridConfig } {
  const family = FAMILIES[architecture].name;
  // Qwen3-Next has no multimodal checkpoint: its fields are always at the top
  const nested = architecture !== 'qwen3_next' && isObject(top.text_config);
  const text: Json = nested ? { ...(top.text_config as Json) } : { ...top };
  const prefix = nested ? 'text_config.' : '';
  const fail = (field: string, problem: string): never => {
    throw new ModelLoadError(file, `field "${field}" ${problem}`);
  };
  const int = (field: string, fallback: number): number => {
    const v = text[field] ?? fallback;
    if (typeof v !== 'number' || !Number.isSafeInteger(v) || v <= 0) fail(prefix + field, `must be a positive integer, got ${JSON.stringify(v)}`);
    return v as number;
  };
  if (top.quantization_config !== undefined && top.quantization_config !== null) {
    fail('quantization_config', `is set: quantized ${family} checkpoints (e.g. the -FP8 ones) are not supported yet; use the bf16 checkpoint`);
  }
  if (architecture === 'qwen3_5') {
    for (const field of ['num_experts', 'shared_expert_intermediate_size']) {
      const v = text[field];
      if (v !== undefined && v !== null && v !== 0) {
        fail(prefix + field, `is ${JSON.stringify(v)} in a dense Qwen3.5 config (Qwen3_5ForCausalLM); the mixture-of-experts ` +
          'variant is Qwen3_5MoeForCausalLM, model_type qwen3_5_moe_text');
      }
    }
  }
  if (text.attention_bias === true) fail(`${prefix}attention_bias`, `is true; ${family} attention biases are not supported`);

  // transformers 5 keeps rope_theta and partial_rotary_factor in rope_parameters; older configs (Qwen3-Next's) at the
  // top level. mrope_section / mrope_interleaved only matter where positions differ per axis (images and video): for
  // text the three position streams are equal and multimodal RoPE is plain RoPE.
  const rope = isObject(text.rope_parameters) ? text.rope_parameters : {};
  const ropeType = rope.rope_type ?? 'default';
  if (ropeType !== 'default') fail(`${prefix}rope_parameters.rope_type`, `is ${JSON.stringify(ropeType)}; only default RoPE is supported for ${family} yet`);
  if (isObject(text.rope_scaling) && (text.rope_scaling.rope_type ?? text.rope_scaling.type) !== 'default') {
    fail(`${prefix}rope_scaling`, `is ${JSON.stringify(text.rope_scaling)}; only default RoPE is supported for ${family} yet`);
  }
  const theta = rope.rope_theta ?? text.rope_theta ?? 10000;
  // each family's config defaults the factor to 0.25 and head_dim to 256
  const factor = rope.partial_rotary_factor ?? text.partial_rotary_factor ?? 0.25;
  if (typeof factor !== 'number' || !(factor > 0 && factor <= 1)) fail(`${prefix}partial_rotary_factor`, `must be in (0, 1], got ${JSON.stringify(factor)}`);
  const headDim = int('head_dim', 256);
  // transformers: int(head_dim * partial_rotary_factor) channels get inv_freq of that dimension
  const rotaryDim = Math.floor(headDim * (factor as number));
  if (rotaryDim < 2 || rotaryDim % 2 !== 0) fail(`${prefix}partial_rotary_factor`, `(${factor}) of head_dim ${headDim} rotates ${rotaryDim} channels; it must be a positive even number`);

  const numLayers = int('num_hidden_layers', 32);
  let layerTypes: LayerType[];
  if (text.layer_types !== undefined && text.layer_types !== null) {
    const lt = text.layer_types;
    if (!Array.isArray(lt) || lt.length !== numLayers || !lt.every((t) => LAYER_TYPES.includes(t as LayerType))) {
      fail(`${prefix}layer_types`, `must list ${numLayers} of ${LAYER_TYPES.join(' / ')}, got ${JSON.stringify(lt)}`);
    }
    layerTypes = lt as LayerType[];
  } else {
    // every full_attention_interval-th layer is full attention (default 4), in each family's config
    const interval = int('full_attention_interval', 4);
    layerTypes = Array.from({ length: numLayers }, (_, i) => (i + 1) % interval === 0 ? 'full_attention' : 'linear_attention');
  }
  if (!layerTypes.includes('full_attention')) fail(`${prefix}layer_types`, 'has no full_attention layer; Quire needs at least one');
  const hybrid: HybridConfig = {
    layerTypes, rotaryDim,
    linearNumKeyHeads: int('linear_num_key_heads', 16),
    linearNumValueHeads: int('linear_num_value_heads', 32),
    linearKeyHeadDim: int('linear_key_head_dim', 128),
    linearValueHeadDim: int('linear_value_head_dim', 128),
    linearConvKernel: int('linear_conv_kernel_dim', 4),
  };
  // vLLM's names: Qwen3_5MultiTokenPredictor reads mtp_num_hidden_layers, Qwen3NextMultiTokenPredictor
  // num_nextn_predict_layers (each defaulting to 1 where the head's tensors are there: mtp-load.ts decides)
  const mtpField = architecture === 'qwen3_next' ? 'num_nextn_predict_layers' : 'mtp_num_hidden_layers';
  if (text[mtpField] !== undefined && text[mtpField] !== null) {
    const n = text[mtpField];
    if (typeof n !== 'number' || !Number.isSafeInteger(n) || n < 0) {
      fail(prefix + mtpField, `must be a non-negative integer, got ${JSON.stringify(n)}`);
    }
    hybrid.mtp = { numLayers: n as number, field: prefix + mtpField,
      dedicatedEmbeddings: text.mtp_use_dedicated_embeddings === true };
  }
  if (hybrid.linearNumValueHeads % hybrid.linearNumKeyHeads !== 0) {
    fail(`${prefix}linear_num_value_heads`, `(${hybrid.linearNumValueHeads}) must be a multiple of linear_num_key_heads (${hybrid.linearNumKeyHeads})`);
  }
  // the flattened fields parseModelConfig reads: RoPE normalised, the dtype and tying from the top where the text
  // config leaves them out (transformers reads the text config's own first)
  const json: Json = { ...text, head_dim: headDim, rope_theta: theta, rope_scaling: null, partial_rotary_factor: undefined,
    architectures: undefined, model_type: FAMILIES[architecture].textModelType };
  if (architecture === 'qwen3_5_moe') {
    // Qwen3_5MoeTextConfig has no intermediate_size (every layer's MLP is the experts, and a config's is ignored): the
    // one dense-shaped MLP a layer has is its shared expert, whose width (default 512, as moe-config.ts reads it)
    // stands in for it
    json.intermediate_size = int('shared_expert_intermediate_size', 512);
  }
  if (nested) {
    if (json.torch_dtype === undefined && json.dtype === undefined) [json.torch_dtype, json.dtype] = [top.torch_dtype, top.dtype];
    if (json.tie_word_embeddings === undefined) json.tie_word_embeddings = top.tie_word_embeddings;
  }
  return { json, prefix, hybrid };
}
