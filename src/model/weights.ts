// Hugging Face weight names (qwen3, qwen2, llama, mistral, phi3: stored fused already) -> backend tensors. q/k/v are fused
// into one [(H + 2 KVH) D, hidden] weight and gate/up into one [2I, hidden]
// weight at load time (rows concatenated, so the fused matmul's output row is
// | q | k | v | and | gate | up |; q/k/v biases likewise). Every expected tensor is checked for
// presence, shape and dtype before the first upload.

import { basename, dirname } from 'node:path';
import type { Backend, Tensor } from '../backend/backend.js';
import { ModelLoadError } from '../loader/errors.js';
import type { DType, HostTensor, ModelConfig, WeightSource } from '../loader/types.js';

export interface LayerWeights {
  inputNorm: Tensor;
  qkv: Tensor;
  /** [(H + 2 KVH) D]: q, k and v biases (ModelConfig.qkvBias), else null. */
  qkvBias: Tensor | null;
  qNorm: Tensor | null;
  kNorm: Tensor | null;
  o: Tensor;
  oBias: Tensor | null;
  postAttentionNorm: Tensor;
  gateUp: Tensor;
  down: Tensor;
}

export interface ModelWeights {
  embedTokens: Tensor;
  layers: LayerWeights[];
  finalNorm: Tensor;
  /** The embedding table itself when word embeddings are tied. */
  lmHead: Tensor;
}

export interface ExpectedTensor {
  name: string;
  shape: number[];
}

const layerPrefix = (l: number): string => `model.layers.${l}.`;

/** Every checkpoint tensor the config calls for, with its shape. */
export function expectedTensors(c: ModelConfig): ExpectedTensor[] {
  const hidden = c.hiddenSize;
  const qDim = c.numHeads * c.headDim;
  const kvDim = c.numKvHeads * c.headDim;
  const out: ExpectedTensor[] = [{ name: 'model.embed_tokens.weight', shape: [c.vocabSize, hidden] }];
  for (let l = 0; l < c.numLayers; l++) {
    const p = layerPrefix(l);
    out.push({ name: `${p}input_layernorm.weight`, shape: [hidden] });
    if (c.fusedProjections) {
      out.push({ name: `${p}self_attn.qkv_proj.weight`, shape: [qDim + 2 * kvDim, hidden] });
    } else {
      out.push(
        { name: `${p}self_attn.q_proj.weight`, shape: [qDim, hidden] },
        { name: `${p}self_attn.k_proj.weight`, shape: [kvDim, hidden] },
        { name: `${p}self_attn.v_proj.weight`, shape: [kvDim, hidden] },
      );
    }
    out.push({ name: `${p}self_attn.o_proj.weight`, shape: [hidden, qDim] });
    if (c.qkvBias) {
      out.push(
        { name: `${p}self_attn.q_proj.bias`, shape: [qDim] },
        { name: `${p}self_attn.k_proj.bias`, shape: [kvDim] },
        { name: `${p}self_attn.v_proj.bias`, shape: [kvDim] },
      );
    }
    if (c.oBias) out.push({ name: `${p}self_attn.o_proj.bias`, shape: [hidden] });
    if (c.qkNorm) {
      out.push(
        { name: `${p}self_attn.q_norm.weight`, shape: [c.headDim] },
        { name: `${p}self_attn.k_norm.weight`, shape: [c.headDim] },
      );
    }
    out.push({ name: `${p}post_attention_layernorm.weight`, shape: [hidden] });
    if (c.fusedProjections) {
      out.push({ name: `${p}mlp.gate_up_proj.weight`, shape: [2 * c.intermediateSize, hidden] });
    } else {
      out.push(
        { name: `${p}mlp.gate_proj.weight`, shape: [c.intermediateSize, hidden] },
        { name: `${p}mlp.up_proj.weight`, shape: [c.intermediateSize, hidden] },
      );
    }
    out.push({ name: `${p}mlp.down_proj.weight`, shape: [hidden, c.intermediateSize] });
  }
  out.push({ name: 'model.norm.weight', shape: [hidden] });
  if (!c.tieWordEmbeddings) out.push({ name: 'lm_head.weight', shape: [c.vocabSize, hidden] });
  return out;
}

function describe(dtype: DType, shape: readonly number[]): string {
  return `${dtype} [${shape.join(', ')}]`;
}

function sameShape(a: readonly number[], b: readonly number[]): boolean {
  return a.length === b.length && a.every((v, i) => v === b[i]);
}

/** Throws ModelLoadError naming the first tensor that is missing or has the wrong shape or dtype. */
export function validateWeights(config: ModelConfig, source: WeightSource): void {
  const names = source.names();
  const checkpoint = names.length > 0 ? basename(dirname(source.info(names[0]!).file)) : 'checkpoint';
  for (const { name, shape } of expectedTensors(config)) {
    const expected = describe(config.dtype, shape);
    if (!source.has(name)) {
      throw new ModelLoadError(checkpoint, `missing tensor ${name} (expected ${expected})`);
    }
    const info = source.info(name);
    if (info.dtype !== config.dtype || !sameShape(info.shape, shape)) {
      throw new ModelLoadError(info.file,
        `tensor ${name} is ${describe(info.dtype, info.shape)}, expected ${expected}`);
    }
  }
}

/** Concatenates row-major tensors of one dtype along their first axis. */
function concatRows(name: string, parts: HostTensor[]): HostTensor {
  const numBytes = parts.reduce((n, p) => n + p.data.byteLength, 0);
  const data = new Uint8Array(numBytes);
  let offset = 0;
  for (const p of parts) {
    data.set(p.data, offset);
    offset += p.data.byteLength;
  }
  const numRows = parts.reduce((n, p) => n + p.shape[0]!, 0);
  return { name, dtype: parts[0]!.dtype, shape: [numRows, ...parts[0]!.shape.slice(1)], data };
}

export function loadWeights(config: ModelConfig, source: WeightSource, backend: Backend): ModelWeights {
  validateWeights(config, source);
  const streamed = backend.uploadConcat !== undefined && source.readInto !== undefined &&
    config.dtype === backend.computeDType;
  const upConcat = (name: string, names: string[]): Tensor => streamed ? backend.uploadConcat!(name, source, names)
    : backend.upload(names.length === 1 ? source.read(names[0]!) : concatRows(name, names.map((n) => source.read(n))));
  const up = (name: string): Tensor => upConcat(name, [name]);
  const embedTokens = up('model.embed_tokens.weight');
  const layers: LayerWeights[] = [];
  for (let l = 0; l < config.numLayers; l++) {
    const p = layerPrefix(l);
    const attn = `${p}self_attn.`;
    const qkv = config.fusedProjections ? up(`${attn}qkv_proj.weight`)
      : upConcat(`${attn}qkv_proj.weight`, ['q_proj', 'k_proj', 'v_proj'].map((n) => `${attn}${n}.weight`));
    const gateUp = config.fusedProjections ? up(`${p}mlp.gate_up_proj.weight`)
      : upConcat(`${p}mlp.gate_up_proj.weight`, ['gate_proj', 'up_proj'].map((n) => `${p}mlp.${n}.weight`));
    const qkvBias = config.qkvBias
      ? upConcat(`${attn}qkv_proj.bias`, ['q_proj', 'k_proj', 'v_proj'].map((n) => `${attn}${n}.bias`)) : null;
    layers.push({
      inputNorm: up(`${p}input_layernorm.weight`),
      qkv,
      qkvBias,
      qNorm: config.qkNorm ? up(`${attn}q_norm.weight`) : null,
      kNorm: config.qkNorm ? up(`${attn}k_norm.weight`) : null,
      o: up(`${attn}o_proj.weight`),
      oBias: config.oBias ? up(`${attn}o_proj.bias`) : null,
      postAttentionNorm: up(`${p}post_attention_layernorm.weight`),
      gateUp,
      down: up(`${p}mlp.down_proj.weight`),
    });
  }
  const finalNorm = up('model.norm.weight');
  const lmHead = config.tieWordEmbeddings ? embedTokens : up('lm_head.weight');
  return { embedTokens, layers, finalNorm, lmHead };
}
