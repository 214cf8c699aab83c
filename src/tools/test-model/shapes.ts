import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { FloatDType } from '../../loader/types.js';
import type { TensorSpec } from '../../loader/safetensors-write.js';
import { FP8_BLOCK } from '../../backend/fp8-linear.js';

export type HfConfig = Record<string, unknown>;

// The sizes every tiny shape shares (head_dim 16, given or derived from 64 / 4)
const TINY_SIZES: HfConfig = {
  hidden_size: 64, intermediate_size: 128, num_hidden_layers: 2, num_attention_heads: 4, num_key_value_heads: 2,
  vocab_size: 512, hidden_act: 'silu',
};

const TINY_SHAPES: Record<string, HfConfig> = {
  'tiny-qwen3': {
    ...TINY_SIZES, architectures: ['Qwen3ForCausalLM'], model_type: 'qwen3', head_dim: 16,
    max_position_embeddings: 4096, rope_theta: 1000000, rms_norm_eps: 1e-6, tie_word_embeddings: true,
    attention_bias: false,
  },
  // head_dim derived (64 / 4 = 16); with original_max_position_embeddings 64 the
  // llama3 rule keeps the fastest RoPE frequency, smooths two and divides the rest by 8.
  'tiny-llama': {
    ...TINY_SIZES, architectures: ['LlamaForCausalLM'], model_type: 'llama', max_position_embeddings: 512,
    rope_theta: 10000,
    rope_scaling: { rope_type: 'llama3', factor: 8.0, low_freq_factor: 1.0, high_freq_factor: 4.0, original_max_position_embeddings: 64 },
    rms_norm_eps: 1e-5, tie_word_embeddings: false, attention_bias: false, mlp_bias: false,
  },
  // q, k and v biases; the sliding window named but off, as in Qwen2.5's configs
  'tiny-qwen2': {
    ...TINY_SIZES, architectures: ['Qwen2ForCausalLM'], model_type: 'qwen2', max_position_embeddings: 4096,
    rope_theta: 1000000, rms_norm_eps: 1e-6, tie_word_embeddings: true, use_sliding_window: false, sliding_window: 4096,
    max_window_layers: 2,
  },
  'tiny-mistral': {
    ...TINY_SIZES, architectures: ['MistralForCausalLM'], model_type: 'mistral', head_dim: 16,
    max_position_embeddings: 4096, rope_theta: 1000000, rms_norm_eps: 1e-5, tie_word_embeddings: false,
    sliding_window: null,
  },
};
// Llama with attention_bias: q, k, v and o biases
TINY_SHAPES['tiny-llama-bias'] = { ...TINY_SHAPES['tiny-llama'], attention_bias: true };
// YaRN as Qwen documents it for long contexts; max_position_embeddings = factor x original, where transformers'
// factor (their ratio) and vLLM's (rope_scaling.factor) agree. A small original context puts the ramp mid-head.
TINY_SHAPES['tiny-qwen3-yarn'] = { ...TINY_SHAPES['tiny-qwen3'], max_position_embeddings: 4096,
  rope_scaling: { rope_type: 'yarn', factor: 4.0, original_max_position_embeddings: 1024 } };
// Phi-3 (q, k, v and gate, up stored fused) with Phi-3-mini-4k's kind of sliding window: full attention within it
TINY_SHAPES['tiny-phi3'] = {
  ...TINY_SIZES, architectures: ['Phi3ForCausalLM'], model_type: 'phi3', max_position_embeddings: 4096,
  original_max_position_embeddings: 4096, rope_theta: 10000, rms_norm_eps: 1e-5, tie_word_embeddings: false,
  sliding_window: 2047, rope_scaling: null, pad_token_id: null,
};
// position interpolation (Llama 2 long-context fine-tunes)
TINY_SHAPES['tiny-llama-linear'] = { ...TINY_SHAPES['tiny-llama'], rope_scaling: { rope_type: 'linear', factor: 2.0 } };
// Mixtures of experts: Qwen3-MoE's layout (norm_topk_prob; layer 1 left dense through mlp_only_layers, its MLP of
// intermediate_size) and Mixtral's (block_sparse_moe, w1/w2/w3, top-k always renormalized)
TINY_SHAPES['tiny-qwen3-moe'] = { ...TINY_SHAPES['tiny-qwen3'], architectures: ['Qwen3MoeForCausalLM'], model_type: 'qwen3_moe',
  num_hidden_layers: 3, num_experts: 8, num_experts_per_tok: 3, moe_intermediate_size: 32, norm_topk_prob: true,
  decoder_sparse_step: 1, mlp_only_layers: [1], tie_word_embeddings: false };
// every layer sparse, as llama.cpp's qwen3moe has it (a GGUF file can hold it: the GGUF tests)
TINY_SHAPES['tiny-qwen3-moe-all'] = { ...TINY_SHAPES['tiny-qwen3-moe'], mlp_only_layers: [] };
TINY_SHAPES['tiny-mixtral'] = { ...TINY_SHAPES['tiny-mistral'], architectures: ['MixtralForCausalLM'], model_type: 'mixtral',
  num_local_experts: 4, num_experts_per_tok: 2, intermediate_size: 48 };
// tiny-qwen3-moe with every projection dimension a multiple of 128 (--quantization fp8, block-FP8 experts)
TINY_SHAPES['tiny-qwen3-moe-128'] = { ...TINY_SHAPES['tiny-qwen3-moe'], hidden_size: 128, intermediate_size: 256,
  moe_intermediate_size: 128, head_dim: 64 };
// and every layer sparse (a qwen3moe GGUF file: test/gpu/gguf-moe.test.ts)
TINY_SHAPES['tiny-qwen3-moe-all-128'] = { ...TINY_SHAPES['tiny-qwen3-moe-128'], mlp_only_layers: [] };
// an EAGLE-3 head's target (test-model/eagle3.ts): with 8 layers vLLM's default aux layers (2, 4, 5) are distinct
TINY_SHAPES['tiny-llama-8l'] = { ...TINY_SHAPES['tiny-llama'], num_hidden_layers: 8 };
// the same at a head dim the CUDA attention kernels are built for (64), for the GPU tests
TINY_SHAPES['tiny-llama-8l-128'] = { ...TINY_SHAPES['tiny-llama-8l'], hidden_size: 128, intermediate_size: 256, head_dim: 64 };
// every projection dimension a multiple of 128, as --quantization fp8 needs (q 4 x 64, k and v 2 x 64)
TINY_SHAPES['tiny-qwen3-128'] = { ...TINY_SHAPES['tiny-qwen3'], hidden_size: 128, intermediate_size: 256, head_dim: 64 };

// Qwen3.5's hybrid text model (transformers' Qwen3_5ForCausalLM): gated DeltaNet and output-gated attention layers
// interleaved (two of each, so both kinds have a second layer's state), 2 key heads serving 4 value heads of another
// dim than the keys', partial rotary (a quarter of head_dim, as the published models), and the multi-token-prediction
// head the published checkpoints carry (mtp_num_hidden_layers 1: mtp.*, a dense layer here)
TINY_SHAPES['tiny-qwen3.5'] = {
  ...TINY_SIZES, architectures: ['Qwen3_5ForCausalLM'], model_type: 'qwen3_5_text', num_hidden_layers: 4, head_dim: 16,
  layer_types: ['linear_attention', 'full_attention', 'linear_attention', 'full_attention'],
  linear_num_key_heads: 2, linear_num_value_heads: 4, linear_key_head_dim: 16, linear_value_head_dim: 8,
  linear_conv_kernel_dim: 4, max_position_embeddings: 4096, rms_norm_eps: 1e-6, tie_word_embeddings: false,
  attention_bias: false, rope_parameters: { rope_type: 'default', rope_theta: 10000, partial_rotary_factor: 0.25 },
  mtp_num_hidden_layers: 1,
};
// The same layer kinds at the published layer sizes the CUDA kernels are built for: attention heads of 256 with a
// rotary quarter (64 channels), DeltaNet key and value heads of 128, 3 value heads a key head
TINY_SHAPES['tiny-qwen3.5-128'] = { ...TINY_SHAPES['tiny-qwen3.5'], hidden_size: 256, intermediate_size: 512,
  num_attention_heads: 2, num_key_value_heads: 1, head_dim: 256, linear_num_key_heads: 2, linear_num_value_heads: 6,
  linear_key_head_dim: 128, linear_value_head_dim: 128 };

// The Qwen3.5 / Qwen3.6 mixture-of-experts variant (transformers' Qwen3_5MoeForCausalLM): tiny-qwen3.5's layers, each
// with a sparse MLP of 8 experts (3 routed, always renormalized) and a shared expert of another width than the
// routed ones'; its experts stored fused (mlp.experts.gate_up_proj [E, 2I, H]) as the published checkpoints store
// them, 2I unlike H so that a transposed reading would fail loudly. Its config has no intermediate_size,
// norm_topk_prob, decoder_sparse_step or mlp_only_layers.
{
  const { intermediate_size: _, ...sizes } = TINY_SHAPES['tiny-qwen3.5']!;
  TINY_SHAPES['tiny-qwen3.5-moe'] = { ...sizes, architectures: ['Qwen3_5MoeForCausalLM'], model_type: 'qwen3_5_moe_text',
    num_experts: 8, num_experts_per_tok: 3, moe_intermediate_size: 24, shared_expert_intermediate_size: 48 };
}
// The MoE variant at the sizes the CUDA kernels are built for (tiny-qwen3.5-128's layers, experts of 128)
TINY_SHAPES['tiny-qwen3.5-moe-128'] = { ...TINY_SHAPES['tiny-qwen3.5-moe'], hidden_size: 256, num_attention_heads: 2,
  num_key_value_heads: 1, head_dim: 256, linear_num_key_heads: 2, linear_num_value_heads: 6, linear_key_head_dim: 128,
  linear_value_head_dim: 128, moe_intermediate_size: 128, shared_expert_intermediate_size: 256 };
// Qwen3-Next (Qwen3NextForCausalLM) as its checkpoints are laid out: DeltaNet input projections fused per key head
// (in_proj_qkvz, in_proj_ba; 2 key heads of 2 value heads each, so the reordering shows), experts one module each,
// layer_types from full_attention_interval, RoPE at the top level (rope_theta, partial_rotary_factor), layer 2 a dense
// MLP through mlp_only_layers, top-k not renormalized (norm_topk_prob false; its default is true), and an MTP head
// (num_nextn_predict_layers 1, the field vLLM reads: mtp.*, its layer sparse as layer 0 is).
TINY_SHAPES['tiny-qwen3-next'] = {
  ...TINY_SIZES, architectures: ['Qwen3NextForCausalLM'], model_type: 'qwen3_next', num_hidden_layers: 4, head_dim: 16,
  full_attention_interval: 2, linear_num_key_heads: 2, linear_num_value_heads: 4, linear_key_head_dim: 16,
  linear_value_head_dim: 8, linear_conv_kernel_dim: 4, max_position_embeddings: 4096, rope_theta: 10000,
  partial_rotary_factor: 0.25, rms_norm_eps: 1e-6, tie_word_embeddings: false, attention_bias: false,
  num_experts: 8, num_experts_per_tok: 3, moe_intermediate_size: 32, shared_expert_intermediate_size: 48,
  norm_topk_prob: false, decoder_sparse_step: 1, mlp_only_layers: [2], num_nextn_predict_layers: 1,
};
// Qwen3-Next at sizes the CUDA kernels are built for (attention heads of 256, DeltaNet heads of 128, experts of 128)
TINY_SHAPES['tiny-qwen3-next-128'] = { ...TINY_SHAPES['tiny-qwen3-next'], hidden_size: 256, intermediate_size: 512,
  num_attention_heads: 2, num_key_value_heads: 1, head_dim: 256, linear_key_head_dim: 128, linear_value_head_dim: 128,
  moe_intermediate_size: 128, shared_expert_intermediate_size: 256 };

function findBenchShapesFile(): string | null {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (;;) {
    const candidate = join(dir, 'bench', 'shapes.json');
    if (existsSync(join(dir, 'package.json')) && existsSync(candidate)) return candidate;
    const up = dirname(dir);
    if (up === dir) return null;
    dir = up;
  }
}

/** Tiny shapes built in, plus every public shape in bench/shapes.json. */
export function testModelShapes(): Record<string, HfConfig> {
  const shapes: Record<string, HfConfig> = { ...TINY_SHAPES };
  const file = findBenchShapesFile();
  if (file !== null) {
    for (const [name, config] of Object.entries(JSON.parse(readFileSync(file, 'utf8')) as Record<string, unknown>)) {
      if (!name.startsWith('_')) shapes[name] = config as HfConfig;
    }
  }
  return shapes;
}

const TORCH_DTYPE: Record<FloatDType, string> = { bf16: 'bfloat16', f16: 'float16', f32: 'float32' };

/** quantization_config as Qwen3-8B-FP8 publishes it (--quantization fp8). */
export const FP8_QUANTIZATION_CONFIG = { activation_scheme: 'dynamic', fmt: 'e4m3', quant_method: 'fp8', weight_block_size: [128, 128] };

/** The shape's config.json; with quantization 'fp8', a block-FP8 checkpoint's. */
export function configForShape(shape: string, dtype: FloatDType, quantization: 'fp8' | null = null): HfConfig {
  const base = testModelShapes()[shape];
  if (base === undefined) {
    throw new Error(`unknown shape "${shape}" (known: ${Object.keys(testModelShapes()).join(', ')})`);
  }
  const config: HfConfig = { ...base, torch_dtype: TORCH_DTYPE[dtype] };
  if (quantization === null) return config;
  // whole 128 x 128 blocks only (as Quire's loader requires)
  const heads = num(config, 'num_attention_heads');
  const headDim = (config.head_dim ?? num(config, 'hidden_size') / heads) as number;
  const dims: [string, number][] = [['hidden_size', num(config, 'hidden_size')],
    ['intermediate_size', num(config, 'intermediate_size')], ['num_attention_heads x head_dim', heads * headDim],
    ['num_key_value_heads x head_dim', ((config.num_key_value_heads ?? heads) as number) * headDim]];
  if (config.moe_intermediate_size !== undefined) dims.push(['moe_intermediate_size', num(config, 'moe_intermediate_size')]);
  for (const [dim, size] of dims) {
    if (size % FP8_BLOCK !== 0) {
      throw new Error(`shape ${shape}: --quantization fp8 needs every projection dimension a multiple of ${FP8_BLOCK}; ${dim} is ${size}`);
    }
  }
  return { ...config, quantization_config: FP8_QUANTIZATION_CONFIG };
}

function num(config: HfConfig, field: string): number {
  const v = config[field];
  if (typeof v !== 'number') throw new Error(`shape config lacks numeric "${field}"`);
  return v;
}

/**
 * Adds a tensor's spec to specs; where the config has a quantization_config, a projection (*_proj.weight) as block
 * FP8: e4m3, and its f32 weight_scale_inv next (the order of names a checkpoint sorts them in).
 */
function specAdder(specs: TensorSpec[], config: HfConfig, dtype: FloatDType): (name: string, shape: number[]) => void {
  const fp8 = config.quantization_config !== undefined;
  return (name, shape) => {
    if (!fp8 || !name.endsWith('_proj.weight')) return void specs.push({ name, dtype, shape });
    specs.push({ name, dtype: 'f8_e4m3', shape },
      { name: `${name}_scale_inv`, dtype: 'f32', shape: shape.map((d) => Math.ceil(d / FP8_BLOCK)) });
  };
}

function isMoeLayer(config: HfConfig, layer: number): boolean {
  if (config.model_type === 'mixtral' || config.model_type === 'qwen3_5_moe_text') return true;
  if (config.num_experts === undefined) return false;
  const mlpOnly = (config.mlp_only_layers ?? []) as number[];
  const step = (config.decoder_sparse_step ?? 1) as number;
  return !mlpOnly.includes(layer) && (layer + 1) % step === 0;
}

/** Every tensor of a checkpoint of this config, with Hugging Face names, in HF's order. */
export function tensorSpecsForConfig(config: HfConfig, dtype: FloatDType): TensorSpec[] {
  if (HYBRID_MODEL_TYPES.includes(config.model_type as string)) return qwen35Specs(config, dtype);
  const hidden = num(config, 'hidden_size');
  const numHeads = num(config, 'num_attention_heads');
  const numKvHeads = (config.num_key_value_heads ?? numHeads) as number;
  const headDim = (config.head_dim ?? hidden / numHeads) as number;
  const vocab = num(config, 'vocab_size');
  const qkNorm = config.model_type === 'qwen3' || config.model_type === 'qwen3_moe';
  // Qwen2: q, k, v biases; Llama and Qwen3 with attention_bias: q, k, v, o; Mistral: none
  const qkvBias = config.model_type === 'qwen2' || (config.model_type !== 'mistral' && config.attention_bias === true);
  const oBias = qkvBias && config.model_type !== 'qwen2';
  const specs: TensorSpec[] = [];
  const add = specAdder(specs, config, dtype);
  add('model.embed_tokens.weight', [vocab, hidden]);
  if (config.model_type === 'phi3') return [...specs, ...phi3Specs(config, dtype, hidden, numHeads, numKvHeads, headDim, vocab)];
  for (let l = 0; l < num(config, 'num_hidden_layers'); l++) {
    const p = `model.layers.${l}`;
    add(`${p}.input_layernorm.weight`, [hidden]);
    if (config.model_type === 'mixtral') {
      const numExperts = num(config, 'num_local_experts');
      const inter = num(config, 'intermediate_size');
      add(`${p}.block_sparse_moe.gate.weight`, [numExperts, hidden]);
      for (let e = 0; e < numExperts; e++) {
        add(`${p}.block_sparse_moe.experts.${e}.w1.weight`, [inter, hidden]);
        add(`${p}.block_sparse_moe.experts.${e}.w2.weight`, [hidden, inter]);
        add(`${p}.block_sparse_moe.experts.${e}.w3.weight`, [inter, hidden]);
      }
    } else if (isMoeLayer(config, l)) {
      const numExperts = num(config, 'num_experts');
      const inter = num(config, 'moe_intermediate_size');
      add(`${p}.mlp.gate.weight`, [numExperts, hidden]);
      for (let e = 0; e < numExperts; e++) {
        add(`${p}.mlp.experts.${e}.down_proj.weight`, [hidden, inter]);
        add(`${p}.mlp.experts.${e}.gate_proj.weight`, [inter, hidden]);
        add(`${p}.mlp.experts.${e}.up_proj.weight`, [inter, hidden]);
      }
    } else {
      const inter = num(config, 'intermediate_size');
      add(`${p}.mlp.down_proj.weight`, [hidden, inter]);
      add(`${p}.mlp.gate_proj.weight`, [inter, hidden]);
      add(`${p}.mlp.up_proj.weight`, [inter, hidden]);
    }
    add(`${p}.post_attention_layernorm.weight`, [hidden]);
    if (qkvBias) add(`${p}.self_attn.k_proj.bias`, [numKvHeads * headDim]);
    add(`${p}.self_attn.k_proj.weight`, [numKvHeads * headDim, hidden]);
    if (qkNorm) add(`${p}.self_attn.k_norm.weight`, [headDim]);
    if (oBias) add(`${p}.self_attn.o_proj.bias`, [hidden]);
    add(`${p}.self_attn.o_proj.weight`, [hidden, numHeads * headDim]);
    if (qkvBias) add(`${p}.self_attn.q_proj.bias`, [numHeads * headDim]);
    add(`${p}.self_attn.q_proj.weight`, [numHeads * headDim, hidden]);
    if (qkNorm) add(`${p}.self_attn.q_norm.weight`, [headDim]);
    if (qkvBias) add(`${p}.self_attn.v_proj.bias`, [numKvHeads * headDim]);
    add(`${p}.self_attn.v_proj.weight`, [numKvHeads * headDim, hidden]);
  }
  add('model.norm.weight', [hidden]);
  if (config.tie_word_embeddings !== true) add('lm_head.weight', [vocab, hidden]);
  return specs;
}

const HYBRID_MODEL_TYPES = ['qwen3_5', 'qwen3_5_text', 'qwen3_5_moe', 'qwen3_5_moe_text', 'qwen3_next'];

/**
 * The hybrid text models, as Qwen3_5ForCausalLM, Qwen3_5MoeForCausalLM and Qwen3NextForCausalLM name them (model.*; a
 * config with text_config, as the published multimodal checkpoints, under model.language_model.*, with no vision
 * tower written). Qwen3-Next's DeltaNet projections fused per key head, its experts one module each; Qwen3.5-MoE's
 * experts fused.
 */
function qwen35Specs(config: HfConfig, dtype: FloatDType): TensorSpec[] {
  const text = (config.text_config ?? config) as HfConfig;
  const prefix = config.text_config !== undefined ? 'model.language_model.' : 'model.';
  const next = text.model_type === 'qwen3_next';
  const hidden = num(text, 'hidden_size');
  const headDim = num(text, 'head_dim');
  const heads = num(text, 'num_attention_heads');
  const kvDim = num(text, 'num_key_value_heads') * headDim;
  const vHeads = num(text, 'linear_num_value_heads');
  const keyDim = num(text, 'linear_num_key_heads') * num(text, 'linear_key_head_dim');
  const valueDim = vHeads * num(text, 'linear_value_head_dim');
  const numLayers = num(text, 'num_hidden_layers');
  const interval = (text.full_attention_interval ?? 4) as number;
  const types = (text.layer_types ?? Array.from({ length: numLayers }, (_, l) =>
    (l + 1) % interval === 0 ? 'full_attention' : 'linear_attention')) as string[];
  const specs: TensorSpec[] = [];
  const add = (name: string, shape: number[]): void => void specs.push({ name: `${prefix}${name}`, dtype, shape });
  add('embed_tokens.weight', [num(text, 'vocab_size'), hidden]);
  types.forEach((type, l) => {
    const p = `layers.${l}.`;
    add(`${p}input_layernorm.weight`, [hidden]);
    if (type === 'full_attention') {
      add(`${p}self_attn.k_norm.weight`, [headDim]);
      add(`${p}self_attn.k_proj.weight`, [kvDim, hidden]);
      add(`${p}self_attn.o_proj.weight`, [hidden, heads * headDim]);
      add(`${p}self_attn.q_norm.weight`, [headDim]);
      add(`${p}self_attn.q_proj.weight`, [2 * heads * headDim, hidden]);
      add(`${p}self_attn.v_proj.weight`, [kvDim, hidden]);
    } else {
      add(`${p}linear_attn.A_log`, [vHeads]);
      add(`${p}linear_attn.conv1d.weight`, [2 * keyDim + valueDim, 1, num(text, 'linear_conv_kernel_dim')]);
      add(`${p}linear_attn.dt_bias`, [vHeads]);
      if (next) {
        add(`${p}linear_attn.in_proj_ba.weight`, [2 * vHeads, hidden]);
        add(`${p}linear_attn.in_proj_qkvz.weight`, [2 * keyDim + 2 * valueDim, hidden]);
      } else {
        add(`${p}linear_attn.in_proj_a.weight`, [vHeads, hidden]);
        add(`${p}linear_attn.in_proj_b.weight`, [vHeads, hidden]);
        add(`${p}linear_attn.in_proj_qkv.weight`, [2 * keyDim + valueDim, hidden]);
        add(`${p}linear_attn.in_proj_z.weight`, [valueDim, hidden]);
      }
      add(`${p}linear_attn.norm.weight`, [num(text, 'linear_value_head_dim')]);
      add(`${p}linear_attn.out_proj.weight`, [hidden, valueDim]);
    }
    if (isMoeLayer(text, l)) {
      hybridExpertSpecs(text, hidden, `${p}mlp.`, add);
    } else {
      const inter = num(text, 'intermediate_size');
      add(`${p}mlp.down_proj.weight`, [hidden, inter]);
      add(`${p}mlp.gate_proj.weight`, [inter, hidden]);
      add(`${p}mlp.up_proj.weight`, [inter, hidden]);
    }
    add(`${p}post_attention_layernorm.weight`, [hidden]);
  });
  add('norm.weight', [hidden]);
  if ((text.tie_word_embeddings ?? config.tie_word_embeddings) !== true) specs.push({ name: 'lm_head.weight', dtype, shape: [num(text, 'vocab_size'), hidden] });
  // the multi-token-prediction head the config declares (vLLM's field names), at the top level as the checkpoints
  // store it: one full-attention layer, sparse where the family's layer 0 is
  if (((text[next ? 'num_nextn_predict_layers' : 'mtp_num_hidden_layers'] ?? 0) as number) > 0) {
    const mtp = (name: string, shape: number[]): void => void specs.push({ name: `mtp.${name}`, dtype, shape });
    mtp('fc.weight', [hidden, 2 * hidden]);
    const p = 'layers.0.';
    mtp(`${p}input_layernorm.weight`, [hidden]);
    mtp(`${p}self_attn.k_norm.weight`, [headDim]);
    mtp(`${p}self_attn.k_proj.weight`, [kvDim, hidden]);
    mtp(`${p}self_attn.o_proj.weight`, [hidden, heads * headDim]);
    mtp(`${p}self_attn.q_norm.weight`, [headDim]);
    mtp(`${p}self_attn.q_proj.weight`, [2 * heads * headDim, hidden]);
    mtp(`${p}self_attn.v_proj.weight`, [kvDim, hidden]);
    if (isMoeLayer(text, 0)) {
      hybridExpertSpecs(text, hidden, `${p}mlp.`, mtp);
    } else {
      const inter = num(text, 'intermediate_size');
      mtp(`${p}mlp.down_proj.weight`, [hidden, inter]);
      mtp(`${p}mlp.gate_proj.weight`, [inter, hidden]);
      mtp(`${p}mlp.up_proj.weight`, [inter, hidden]);
    }
    mtp(`${p}post_attention_layernorm.weight`, [hidden]);
    mtp('norm.weight', [hidden]);
    mtp('pre_fc_norm_embedding.weight', [hidden]);
    mtp('pre_fc_norm_hidden.weight', [hidden]);
  }
  return specs;
}

/** A hybrid sparse MLP's tensors under `m` (a layer's mlp.): router, experts (Qwen3.5-MoE's fused), shared expert. */
function hybridExpertSpecs(text: HfConfig, hidden: number, m: string, add: (name: string, shape: number[]) => void): void {
  const [E, I, Is] = [num(text, 'num_experts'), num(text, 'moe_intermediate_size'), num(text, 'shared_expert_intermediate_size')];
  if (text.model_type === 'qwen3_next') {
    for (let e = 0; e < E; e++) {
      add(`${m}experts.${e}.down_proj.weight`, [hidden, I]);
      add(`${m}experts.${e}.gate_proj.weight`, [I, hidden]);
      add(`${m}experts.${e}.up_proj.weight`, [I, hidden]);
    }
  } else {
    add(`${m}experts.down_proj`, [E, hidden, I]);
    add(`${m}experts.gate_up_proj`, [E, 2 * I, hidden]);
  }
  add(`${m}gate.weight`, [E, hidden]);
  add(`${m}shared_expert.down_proj.weight`, [hidden, Is]);
  add(`${m}shared_expert.gate_proj.weight`, [Is, hidden]);
  add(`${m}shared_expert.up_proj.weight`, [Is, hidden]);
  add(`${m}shared_expert_gate.weight`, [1, hidden]);
}

/** Phi-3's layers: qkv_proj and gate_up_proj stored fused. */
function phi3Specs(config: HfConfig, dtype: FloatDType, hidden: number, numHeads: number, numKvHeads: number,
  headDim: number, vocab: number): TensorSpec[] {
  const specs: TensorSpec[] = [];
  const add = specAdder(specs, config, dtype);
  const inter = num(config, 'intermediate_size');
  for (let l = 0; l < num(config, 'num_hidden_layers'); l++) {
    const p = `model.layers.${l}`;
    add(`${p}.input_layernorm.weight`, [hidden]);
    add(`${p}.mlp.down_proj.weight`, [hidden, inter]);
    add(`${p}.mlp.gate_up_proj.weight`, [2 * inter, hidden]);
    add(`${p}.post_attention_layernorm.weight`, [hidden]);
    add(`${p}.self_attn.o_proj.weight`, [hidden, numHeads * headDim]);
    add(`${p}.self_attn.qkv_proj.weight`, [(numHeads + 2 * numKvHeads) * headDim, hidden]);
  }
  add('model.norm.weight', [hidden]);
  if (config.tie_word_embeddings !== true) add('lm_head.weight', [vocab, hidden]);
  return specs;
}
