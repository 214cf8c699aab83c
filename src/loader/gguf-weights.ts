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

/** Phi-3's fused projections (llama.cpp's phi3): attn_qkv [q; k; v], and ffn_up holding gate then up rows. */
const PHI3_LAYER: Record<string, string> = { ...LAYER, attn_qkv: 'self_attn.qkv_proj', ffn_up: 'mlp.gate_up_proj' };

const layerNames = (architecture?: string): Record<string, string> => (architecture === 'phi3' ? PHI3_LAYER : LAYER);

/** Tensors the config consumes rather than the model (rope_freqs: Llama 3's RoPE scaling, read by gguf-config.ts). */
const CONSUMED = new Set(['rope_freqs.weight']);

/** llama.cpp's tensor name -> the Hugging Face one, or null where Quire has no such tensor. */
export function hfTensorName(gguf: string, architecture?: string): string | null {
  const global = GLOBAL[gguf];
  if (global !== undefined) return global;
  const m = /^blk\.(\d+)\.([a-z_]+)\.(weight|bias)$/.exec(gguf);
  const module = m ? layerNames(architecture)[m[2]!] : undefined;
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

/**
 * A mixture of experts' tensors under the Hugging Face model's names: the router (ffn_gate_inp) and llama.cpp's stacked
 * experts (ffn_{gate,up,down}_exps [E, rows, cols]), each expert a slab of them. Qwen3-MoE's modules are
 * mlp.gate and mlp.experts.{e}.{gate,up,down}_proj, Mixtral's block_sparse_moe.gate and .experts.{e}.{w1,w3,w2}.
 */
export function moeTensorNames(architecture: string): { router: string; experts: Record<string, string> } | null {
  if (architecture === 'qwen3_moe') {
    return { router: 'mlp.gate', experts: { ffn_gate_exps: 'mlp.experts.{e}.gate_proj', ffn_up_exps: 'mlp.experts.{e}.up_proj',
      ffn_down_exps: 'mlp.experts.{e}.down_proj' } };
  }
  if (architecture === 'mixtral') {
    return { router: 'block_sparse_moe.gate', experts: { ffn_gate_exps: 'block_sparse_moe.experts.{e}.w1',
      ffn_up_exps: 'block_sparse_moe.experts.{e}.w3', ffn_down_exps: 'block_sparse_moe.experts.{e}.w2' } };
  }
  return null;
}

/** A Hugging Face tensor's place in the file: a GGUF tensor, or expert e's slab of a stacked one. */
interface Place {
  tensor: string;
  expert: number | null;
}

/** The Hugging Face names of GGUF tensor `name` (several for stacked experts), or null where Quire has none. */
function hfPlaces(name: string, shape: readonly number[], architecture: string): [string, Place][] | null {
  const hf = hfTensorName(name, architecture);
  if (hf !== null) return [[hf, { tensor: name, expert: null }]];
  const moe = moeTensorNames(architecture);
  const m = /^blk\.(\d+)\.([a-z_]+)\.weight$/.exec(name);
  if (moe === null || m === null) return null;
  const layer = `model.layers.${m[1]}.`;
  if (m[2] === 'ffn_gate_inp') return [[`${layer}${moe.router}.weight`, { tensor: name, expert: null }]];
  const module = moe.experts[m[2]!];
  if (module === undefined || shape.length !== 3) return null;
  return Array.from({ length: shape[0]! }, (_, e) => [`${layer}${module.replace('{e}', String(e))}.weight`, { tensor: name, expert: e }]);
}

export function ggufWeightSource(gguf: GgufFile, config: ModelConfig, permutedQk: boolean): WeightSource {
  const byHf = new Map<string, Place>();
  for (const [name, t] of gguf.tensors) {
    if (CONSUMED.has(name)) continue;
    const places = hfPlaces(name, t.shape, config.architecture);
    if (places === null) throw new ModelLoadError(gguf.file, `tensor ${name} is not one Quire knows (a ${config.architecture} model has none such)`);
    for (const [hf, place] of places) byHf.set(hf, place);
  }
  const place = (name: string): Place => {
    const g = byHf.get(name);
    if (g === undefined) throw new ModelLoadError(gguf.file, `missing tensor ${name}`);
    return g;
  };
  const get = (name: string): string => place(name).tensor;
  const info = (name: string): { dtype: DType; shape: number[]; file: string } => {
    const p = place(name);
    const shape = gguf.tensors.get(p.tensor)!.shape;
    return { dtype: 'f32', shape: p.expert === null ? shape : shape.slice(1), file: gguf.file };
  };
  const permuted = (name: string): boolean => permutedQk && /self_attn\.[qk]_proj\.(weight|bias)$/.test(name);
  return {
    names: () => [...byHf.keys()],
    has: (name) => byHf.has(name),
    info,
    read(name: string): HostTensor {
      const { shape } = info(name);
      const { tensor, expert } = place(name);
      const slab = shape.reduce((a, b) => a * b, 1);
      let values = expert === null ? gguf.readF32(tensor) : gguf.readSliceF32(tensor, expert * slab, slab);
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
export function ggufTensorName(hf: string, architecture?: string): string | null {
  for (const [g, h] of Object.entries(GLOBAL)) if (h === hf) return g;
  const m = /^model\.layers\.(\d+)\.(.+)\.(weight|bias)$/.exec(hf);
  const entry = m ? Object.entries(layerNames(architecture)).find(([, module]) => module === m[2]) : undefined;
  return entry === undefined ? null : `blk.${m![1]}.${entry[0]}.${m![3]}`;
}
