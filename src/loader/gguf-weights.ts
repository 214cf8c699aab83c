// A GGUF file's tensors under the Hugging Face names the model loaders read, as f32 (dequantized), with llama.cpp's
// q/k row permutation undone where convert_hf_to_gguf.py applied it.
import { readKnob } from '../knobs/knobs.js';
import { ModelLoadError } from './errors.js';
import type { GgufFile } from './gguf.js';
import { GGML_TYPES } from './gguf-quants.js';
import type { DType, GgufBlocks, GgufBlockType, HostTensor, ModelConfig, WeightSource } from './types.js';

/** The block types whose raw blocks readGgufBlocks hands out (F32, F16 and BF16 tensors are read as floats). */
export const GGUF_BLOCK_TYPES: readonly GgufBlockType[] = ['Q8_0', 'Q4_0', 'Q4_K', 'Q5_K', 'Q6_K'];

const GLOBAL: Record<string, string> = {
  'token_embd.weight': 'model.embed_tokens.weight',
  'output_norm.weight': 'model.norm.weight',
  'output.weight': 'lm_head.weight',
};

/** blk.N.<name> -> model.layers.N.<HF module>; a .weight or .bias suffix carries over. */
const LAYER: Record<string, string> = {
  attn_norm: 'input_layernorm',
  attn_q: 'self_attn.q_proj',
  attn_k: 'self_attn.k_proj',
  attn_v: 'self_attn.v_proj',
  attn_output: 'self_attn.o_proj',
  attn_q_norm: 'self_attn.q_norm',
  attn_k_norm: 'self_attn.k_norm',
  ffn_norm: 'post_attention_layernorm',
  ffn_gate: 'mlp.gate_proj',
  ffn_up: 'mlp.up_proj',
  ffn_down: 'mlp.down_proj',
};

/** Tensors the config consumes rather than the model (rope_freqs: Llama 3's RoPE scaling, read by gguf-config.ts). */
const CONSUMED = new Set(['rope_freqs.weight']);

/** llama.cpp's tensor name -> the Hugging Face one, or null where Quire has no such tensor. */
export function hfTensorName(gguf: string): string | null {
  const global = GLOBAL[gguf];
  if (global !== undefined) return global;
  const m = /^blk\.(\d+)\.([a-z_]+)\.(weight|bias)$/.exec(gguf);
  const module = m ? LAYER[m[2]!] : undefined;
  return module === undefined ? null : `model.layers.${m![1]}.${module}.${m![3]}`;
}

/**
 * Undoes convert_hf_to_gguf.py's LlamaModel.permute on `rows` of `cols`: within each head of `headDim` rows, GGUF row
 * 2i + j holds HF row j * headDim / 2 + i (HF rotates halves, llama.cpp interleaved pairs).
 */
export function unpermuteQk(src: Float32Array, rows: number, cols: number, headDim: number): Float32Array {
  return unpermuteQkRows(src, rows, cols, headDim);
}

/**
 * unpermuteQk on any row-major array of `rows` rows of `rowLength` elements: the same permutation moves whole rows, so
 * it undoes llama.cpp's on quantized blocks as well (a block lies within one row: blocks run along K).
 */
export function unpermuteQkRows<A extends Float32Array | Uint8Array>(src: A, rows: number, rowLength: number,
  headDim: number): A {
  const out = new (src.constructor as new (n: number) => A)(src.length);
  const halfDim = headDim / 2;
  for (let r = 0; r < rows; r++) {
    const head = Math.floor(r / headDim), within = r % headDim;
    const hf = head * headDim + (within % 2) * halfDim + (within >> 1);
    out.set(src.subarray(r * rowLength, (r + 1) * rowLength), hf * rowLength);
  }
  return out;
}

export function ggufWeightSource(gguf: GgufFile, config: ModelConfig, permutedQk: boolean): WeightSource {
  const byHf = new Map<string, string>();
  for (const name of gguf.tensors.keys()) {
    if (CONSUMED.has(name)) continue;
    const hf = hfTensorName(name);
    if (hf === null) throw new ModelLoadError(gguf.file, `tensor ${name} is not one Quire knows (a ${config.architecture} model has none such)`);
    byHf.set(hf, name);
  }
  const get = (name: string): string => {
    const g = byHf.get(name);
    if (g === undefined) throw new ModelLoadError(gguf.file, `missing tensor ${name}`);
    return g;
  };
  const info = (name: string): { dtype: DType; shape: number[]; file: string } =>
    ({ dtype: 'f32', shape: gguf.tensors.get(get(name))!.shape, file: gguf.file });
  const permuted = (name: string): boolean => permutedQk && /self_attn\.[qk]_proj\.(weight|bias)$/.test(name);
  return {
    names: () => [...byHf.keys()],
    has: (name) => byHf.has(name),
    info,
    read(name: string): HostTensor {
      const { shape } = info(name);
      let values = gguf.readF32(get(name));
      if (permuted(name)) values = unpermuteQk(values, shape[0]!, shape.length > 1 ? shape[1]! : 1, config.headDim);
      return { name, dtype: 'f32', shape, data: new Uint8Array(values.buffer, values.byteOffset, values.byteLength) };
    },
    // QUIRE_GGUF_BLOCKS=0: none, so every backend uploads the dequantized values (the A/B baseline)
    readGgufBlocks: !readKnob('QUIRE_GGUF_BLOCKS') ? undefined : (name: string): GgufBlocks | null => {
      const b = blocksOf(name);
      if (b === null) return null;
      let data = gguf.readRaw(b.tensor);
      if (permuted(name)) data = unpermuteQkRows(data, b.N, b.rowBytes, config.headDim);
      return { name, type: b.type, shape: [b.N, b.K], data };
    },
    ggufBlockBytes: !readKnob('QUIRE_GGUF_BLOCKS') ? undefined : (name: string): number | null => {
      const b = byHf.has(name) ? blocksOf(name) : null;
      return b === null ? null : b.N * b.rowBytes;
    },
  };

  /** A 2-D tensor of a block type: its GGUF name, type, rows, columns and bytes a row; else null. */
  function blocksOf(name: string): { tensor: string; type: GgufBlockType; N: number; K: number; rowBytes: number } | null {
    const t = gguf.tensors.get(get(name))!;
    const type = t.type as GgufBlockType;
    if (t.shape.length !== 2 || !GGUF_BLOCK_TYPES.includes(type)) return null;
    const [N, K] = t.shape as [number, number];
    return { tensor: t.name, type, N, K, rowBytes: (K / GGML_TYPES[type].blockElems) * GGML_TYPES[type].blockBytes };
  }
}

/** The Hugging Face name -> llama.cpp's (the inverse of hfTensorName), or null. */
export function ggufTensorName(hf: string): string | null {
  for (const [g, h] of Object.entries(GLOBAL)) if (h === hf) return g;
  const m = /^model\.layers\.(\d+)\.(.+)\.(weight|bias)$/.exec(hf);
  const entry = m ? Object.entries(LAYER).find(([, module]) => module === m[2]) : undefined;
  return entry === undefined ? null : `blk.${m![1]}.${entry[0]}.${m![3]}`;
}
