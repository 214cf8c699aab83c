// GGUF metadata (llama.cpp's keys) -> the config.json fields parseModelConfig reads, so a GGUF model is checked and
// normalised by the same code as a Hugging Face one.
import { parseModelConfig } from './config.js';
import { ModelLoadError } from './errors.js';
import type { GgufFile, GgufValue } from './gguf.js';
import type { ModelConfig } from './types.js';

/**
 * general.architecture -> config.json's class; the families whose tensors gguf-weights.ts maps. llama.cpp writes
 * Mixtral as llama with experts (its expert_count set): MixtralForCausalLM then.
 */
const GGUF_ARCHITECTURES: Record<string, string> = { qwen3: 'Qwen3ForCausalLM', qwen2: 'Qwen2ForCausalLM', llama: 'LlamaForCausalLM',
  qwen3moe: 'Qwen3MoeForCausalLM', phi3: 'Phi3ForCausalLM' };

/** general.file_type (llama.cpp's enum llama_ftype) -> the name llama.cpp's quantize and file names use. */
export const GGUF_FILE_TYPES: Readonly<Record<number, string>> = {
  0: 'f32', 1: 'f16', 2: 'q4_0', 3: 'q4_1', 7: 'q8_0', 8: 'q5_0', 9: 'q5_1', 10: 'q2_k', 11: 'q3_k_s', 12: 'q3_k_m',
  13: 'q3_k_l', 14: 'q4_k_s', 15: 'q4_k_m', 16: 'q5_k_s', 17: 'q5_k_m', 18: 'q6_k', 32: 'bf16',
};

/**
 * What a GGUF file is quantized as, for gate path names: general.file_type's name, or (a file without it, or with a
 * value not listed) the block type holding most of its tensor bytes, lowercased ("q4_k").
 */
export function ggufQuantizationName(gguf: GgufFile): string {
  const ft = gguf.metadata.get('general.file_type');
  const named = ft === undefined ? undefined : GGUF_FILE_TYPES[Number(ft)];
  if (named !== undefined) return named;
  const bytes = new Map<string, number>();
  for (const t of gguf.tensors.values()) bytes.set(t.type, (bytes.get(t.type) ?? 0) + t.numBytes);
  return [...bytes].sort((a, b) => b[1] - a[1])[0]?.[0].toLowerCase() ?? 'empty';
}

/** The families whose q and k rows convert_hf_to_gguf.py permutes for llama.cpp's interleaved-pair RoPE. */
export function ggufPermutesQk(arch: string): boolean {
  return arch === 'llama';
}

type Json = Record<string, unknown>;

export class GgufMeta {
  constructor(readonly gguf: GgufFile) {}

  fail(key: string, problem: string): never {
    throw new ModelLoadError(this.gguf.file, `metadata "${key}" ${problem}`);
  }

  has(key: string): boolean {
    return this.gguf.metadata.has(key);
  }

  raw(key: string): GgufValue | undefined {
    return this.gguf.metadata.get(key);
  }

  number(key: string, fallback?: number): number {
    const v = this.raw(key);
    if (v === undefined) {
      if (fallback !== undefined) return fallback;
      this.fail(key, 'is missing');
    }
    const n = typeof v === 'bigint' ? Number(v) : v;
    if (typeof n !== 'number' || !Number.isFinite(n)) this.fail(key, `must be a number, got ${describe(v)}`);
    return shortestF32Decimal(n);
  }

  string(key: string): string | undefined {
    const v = this.raw(key);
    if (v !== undefined && typeof v !== 'string') this.fail(key, `must be a string, got ${describe(v)}`);
    return v;
  }

  strings(key: string): string[] | undefined {
    const v = this.raw(key);
    if (v === undefined) return undefined;
    if (!Array.isArray(v) || !v.every((s) => typeof s === 'string')) this.fail(key, 'must be an array of strings');
    return v as string[];
  }

  numbers(key: string): number[] | undefined {
    const v = this.raw(key);
    if (v === undefined) return undefined;
    if (!Array.isArray(v) || !v.every((s) => typeof s === 'number' || typeof s === 'bigint')) this.fail(key, 'must be an array of numbers');
    return v.map(Number);
  }
}

/**
 * GGUF keeps float fields as f32 (1e-5 as 0.0000099999997): the shortest decimal that rounds to the same f32 is the
 * value config.json held, so a GGUF model computes with the same epsilon and theta as its Hugging Face original.
 */
export function shortestF32Decimal(x: number): number {
  if (Number.isInteger(x) || Math.fround(x) !== x) return x;
  for (let digits = 1; digits <= 9; digits++) {
    const d = Number(x.toPrecision(digits));
    if (Math.fround(d) === x) return d;
  }
  return x;
}

function describe(v: GgufValue | undefined): string {
  if (Array.isArray(v)) return `an array of ${v.length}`;
  return typeof v === 'bigint' ? String(v) : JSON.stringify(v);
}

/** rope_freqs.weight (llama.cpp's Llama 3 frequency factors) -> the llama3 rope_scaling that gives them, or a refusal. */
function llama3ScalingFromFactors(m: GgufMeta, factors: Float32Array, headDim: number, theta: number): Json {
  const factor = Math.max(...factors);
  // Llama 3.1 / 3.2's published values; the factors are checked against them, so another setting is refused, not guessed
  const low = 1, high = 4, orig = m.number(`llama.rope.scaling.original_context_length`, 8192);
  for (let i = 0; i < factors.length; i++) {
    const wavelen = 2 * Math.PI * theta ** ((2 * i) / headDim);
    let want: number;
    if (wavelen < orig / high) want = 1;
    else if (wavelen > orig / low) want = factor;
    else {
      const smooth = (orig / wavelen - low) / (high - low);
      want = 1 / ((1 - smooth) / factor + smooth);
    }
    if (Math.abs(want - factors[i]!) > 1e-3 * want) {
      throw new ModelLoadError(m.gguf.file, `tensor rope_freqs.weight is not Llama 3's RoPE scaling with low_freq_factor 1, ` +
        `high_freq_factor 4 and original context ${orig} (factor ${i} is ${factors[i]}, expected ${want}); only that is supported`);
    }
  }
  return { rope_type: 'llama3', factor, low_freq_factor: low, high_freq_factor: high, original_max_position_embeddings: orig };
}

function ropeScaling(m: GgufMeta, arch: string, headDim: number, theta: number): Json | null {
  if (m.gguf.tensors.has('rope_freqs.weight')) {
    if (arch !== 'llama') m.fail('general.architecture', `is ${arch} with a rope_freqs.weight tensor; only Llama 3's is supported`);
    return llama3ScalingFromFactors(m, m.gguf.readF32('rope_freqs.weight'), headDim, theta);
  }
  const key = `${arch}.rope.scaling.type`;
  const type = m.string(key) ?? 'none';
  if (type === 'none') return null;
  const factor = m.number(`${arch}.rope.scaling.factor`);
  if (type === 'linear') return { rope_type: 'linear', factor };
  if (type === 'yarn') {
    const out: Json = { rope_type: 'yarn', factor };
    if (m.has(`${arch}.rope.scaling.original_context_length`)) {
      out.original_max_position_embeddings = m.number(`${arch}.rope.scaling.original_context_length`);
    }
    for (const [k, hf] of [['yarn_beta_fast', 'beta_fast'], ['yarn_beta_slow', 'beta_slow']] as const) {
      if (m.has(`${arch}.rope.scaling.${k}`)) out[hf] = m.number(`${arch}.rope.scaling.${k}`);
    }
    return out;
  }
  return m.fail(key, `is ${JSON.stringify(type)}, which is not supported (supported: none, linear, yarn)`);
}

/**
 * A mixture of experts' config.json fields, from llama.cpp's expert keys, or null for a dense model. qwen3moe: every
 * layer sparse, the top k's weights renormalized (llama.cpp's build_moe_ffn with norm_w for it, as
 * Qwen3-30B-A3B's norm_topk_prob). llama with experts: Mixtral (experts of feed_forward_length).
 */
function moeFields(m: GgufMeta, arch: string): { cls: string; fields: Json; expertWidth: number } | null {
  const key = (k: string): string => `${arch}.${k}`;
  const count = m.has(key('expert_count')) ? m.number(key('expert_count')) : 0;
  if (count === 0) {
    if (arch === 'qwen3moe') m.fail(key('expert_count'), 'is missing: a qwen3moe model has experts');
    return null;
  }
  const used = m.number(key('expert_used_count'));
  if (!(used >= 1 && used <= count)) m.fail(key('expert_used_count'), `is ${used}: it must be 1 to expert_count (${count})`);
  if (m.has(key('expert_shared_feed_forward_length'))) {
    m.fail(key('expert_shared_feed_forward_length'), 'is set: shared experts (Qwen2-MoE) are not supported in GGUF files');
  }
  if (arch === 'qwen3moe') {
    const width = m.number(key('expert_feed_forward_length'));
    return { cls: 'Qwen3MoeForCausalLM', expertWidth: width, fields: { num_experts: count, num_experts_per_tok: used,
      moe_intermediate_size: width, norm_topk_prob: true, decoder_sparse_step: 1, mlp_only_layers: [] } };
  }
  if (arch === 'llama') {
    return { cls: 'MixtralForCausalLM', expertWidth: m.number(key('feed_forward_length')),
      fields: { num_local_experts: count, num_experts_per_tok: used } };
  }
  return m.fail(key('expert_count'), `is set: a ${arch} model with experts is not supported`);
}

/**
 * Phi-3's extra field: its sliding window (phi3.attention.sliding_window, as Phi-3-mini-4k's). LongRoPE (the 128k models' rope_factors_long / rope_factors_short tensors) is refused, as Quire's
 * config loader refuses rope_type longrope.
 */
function phi3Fields(m: GgufMeta): Json {
  for (const t of ['rope_factors_long.weight', 'rope_factors_short.weight']) {
    if (m.gguf.tensors.has(t)) m.fail('general.architecture', `is phi3 with a ${t} tensor (LongRoPE), which is not supported`);
  }
  const out: Json = {};
  if (m.has('phi3.attention.sliding_window')) out.sliding_window = m.number('phi3.attention.sliding_window');
  return out;
}

/** The config.json a GGUF file's metadata stands for (the fields parseModelConfig reads). */
export function ggufHfConfig(gguf: GgufFile): Json {
  const m: GgufMeta = new GgufMeta(gguf);
  const arch = m.string('general.architecture');
  if (arch === undefined) m.fail('general.architecture', 'is missing');
  const cls = GGUF_ARCHITECTURES[arch];
  if (cls === undefined) {
    m.fail('general.architecture', `is ${JSON.stringify(arch)}, which is not supported (supported: ${Object.keys(GGUF_ARCHITECTURES).join(', ')})`);
  }
  const k = (key: string): string => `${arch}.${key}`;
  const moe = moeFields(m, arch);
  const phi3 = arch === 'phi3' ? phi3Fields(m) : {};
  for (const key of ['feed_forward_length', 'attention.head_count', 'attention.head_count_kv']) {
    if (Array.isArray(m.raw(k(key)))) m.fail(k(key), 'varies per layer, which is not supported');
  }
  const hidden = m.number(k('embedding_length'));
  const heads = m.number(k('attention.head_count'));
  const headDim = m.number(k('attention.key_length'), hidden / heads);
  if (m.has(k('attention.value_length')) && m.number(k('attention.value_length')) !== headDim) {
    m.fail(k('attention.value_length'), `(${m.number(k('attention.value_length'))}) differs from the key length (${headDim}); not supported`);
  }
  if (m.has(k('rope.dimension_count')) && m.number(k('rope.dimension_count')) !== headDim) {
    m.fail(k('rope.dimension_count'), `(${m.number(k('rope.dimension_count'))}) is not the head dimension (${headDim}): ` +
      'a partial rotation is not supported');
  }
  const theta = m.number(k('rope.freq_base'), 10000);
  const tokens = m.strings('tokenizer.ggml.tokens');
  const embd = gguf.tensors.get('token_embd.weight');
  const vocab = m.has(k('vocab_size')) ? m.number(k('vocab_size')) : embd?.shape[0] ?? tokens?.length;
  if (vocab === undefined) m.fail(k('vocab_size'), 'is missing (and so are token_embd.weight and tokenizer.ggml.tokens)');
  return {
    architectures: [moe?.cls ?? cls],
    ...moe?.fields,
    hidden_size: hidden,
    intermediate_size: m.number(k('feed_forward_length'), moe?.expertWidth),
    num_hidden_layers: m.number(k('block_count')),
    num_attention_heads: heads,
    num_key_value_heads: m.number(k('attention.head_count_kv'), heads),
    head_dim: headDim,
    max_position_embeddings: m.number(k('context_length')),
    rms_norm_eps: m.number(k('attention.layer_norm_rms_epsilon')),
    rope_theta: theta,
    rope_scaling: ropeScaling(m, arch, headDim, theta),
    vocab_size: vocab,
    // llama.cpp writes no output.weight when the embeddings are tied
    tie_word_embeddings: !gguf.tensors.has('output.weight'),
    attention_bias: arch !== 'qwen2' && gguf.tensors.has('blk.0.attn_q.bias'),
    ...phi3,
    torch_dtype: 'float32',
  };
}

/** A GGUF file's ModelConfig; every weight is read as f32 (dequantized), so its dtype is f32. */
export function ggufModelConfig(gguf: GgufFile, overrides: Record<string, unknown> | null = null): ModelConfig {
  const json = { ...ggufHfConfig(gguf), ...overrides };
  return parseModelConfig(json, overrides ? `${gguf.file} with --hf-overrides` : gguf.file);
}
