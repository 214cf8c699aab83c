// Hugging Face weight names (qwen3, qwen2, llama, mistral, phi3: stored fused already) -> backend tensors. q/k/v are fused
// into one [(H + 2 KVH) D, hidden] weight and gate/up into one [2I, hidden]
// weight at load time (rows concatenated, so the fused matmul's output row is
// | q | k | v | and | gate | up |; q/k/v biases likewise). Every expected tensor is checked for
// presence, shape and dtype before the first upload. In a block-FP8 checkpoint (ModelConfig.quantization) each
// projection is e4m3 with its weight_scale_inv, fused the same way by the backend's uploadFp8Block; with
// --quantization fp8 (LoadOptions) a float checkpoint's projections are quantized so at load. A GGUF file's quantized
// projections (and lm_head) stay llama.cpp's blocks where the backend keeps them (uploadGguf), fused the same way.

import { basename, dirname } from 'node:path';
import type { Backend, Fp8BlockPart, Tensor } from '../../backend/backend.js';
import { bf16ToF32, bytesToF32, f32ToBf16, f32ToBytes } from '../../loader/dtype.js';
import { fp8Module } from '../../loader/config.js';
import { ModelLoadError } from '../../loader/errors.js';
import type { DType, GgufBlocks, ModelConfig, WeightSource } from '../../loader/types.js';
import { FP8_BLOCK, quantizeWeightBlocks } from '../../backend/fp8-linear.js';
import { computesLogits, embedsTokens, type LoadOptions } from '../load-options.js';
import { partsUploader } from './weight-parts.js';
import { addExpertTensors, expertModules, extraExpertTensor, routerModule, type LayerExperts } from './moe-weights.js';

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
  /** The dense MLP's weights; null on a mixture-of-experts layer (`experts`). */
  gateUp: Tensor | null;
  down: Tensor | null;
  /** A mixture-of-experts layer's router [E, hidden] and stacked experts (moe-weights.ts); null on a dense one. */
  experts: LayerExperts | null;
}

/** A pipeline stage's (ModelConfig.pipelineStage) leaves out what it does not run: null there. */
export interface ModelWeights {
  embedTokens: Tensor | null;
  layers: LayerWeights[];
  finalNorm: Tensor | null;
  /** The embedding table itself when word embeddings are tied. */
  lmHead: Tensor | null;
}

/**
 * Which of the tensors around the layers a config's model reads: a pipeline stage only those it runs (the last
 * reads embed_tokens as its lm_head where they are tied).
 */
export function outerTensors(c: ModelConfig): { embedTokens: boolean; finalNorm: boolean; lmHead: boolean } {
  const logits = computesLogits(c);
  return { embedTokens: embedsTokens(c) || (logits && c.tieWordEmbeddings), finalNorm: logits, lmHead: logits && !c.tieWordEmbeddings };
}

export interface ExpectedTensor {
  name: string;
  shape: number[];
  dtype: DType;
}

const layerPrefix = (l: number): string => `model.layers.${l}.`;

/** Every checkpoint tensor the config calls for, with its shape and dtype. */
export function expectedTensors(c: ModelConfig): ExpectedTensor[] {
  const hidden = c.hiddenSize;
  const qDim = c.numHeads * c.headDim;
  const kvDim = c.numKvHeads * c.headDim;
  const out: ExpectedTensor[] = [];
  const add = (name: string, shape: number[]): void => void out.push({ name, shape, dtype: c.dtype });
  // a projection's weight: block FP8 (e4m3, and its scale per 128 x 128 block) or of the checkpoint's dtype
  const linear = (module: string, shape: [number, number]): void => {
    if (!fp8Module(c, module)) return void add(`${module}.weight`, shape);
    out.push({ name: `${module}.weight`, shape, dtype: 'f8_e4m3' },
      { name: `${module}.weight_scale_inv`, shape: shape.map((d) => Math.ceil(d / FP8_BLOCK)), dtype: 'f32' });
  };
  const outer = outerTensors(c);
  if (outer.embedTokens) add('model.embed_tokens.weight', [c.vocabParallel?.rows ?? c.vocabSize, hidden]);
  for (let l = 0; l < c.numLayers; l++) {
    const p = layerPrefix(l);
    add(`${p}input_layernorm.weight`, [hidden]);
    if (c.fusedProjections) {
      linear(`${p}self_attn.qkv_proj`, [qDim + 2 * kvDim, hidden]);
    } else {
      linear(`${p}self_attn.q_proj`, [qDim, hidden]);
      linear(`${p}self_attn.k_proj`, [kvDim, hidden]);
      linear(`${p}self_attn.v_proj`, [kvDim, hidden]);
    }
    linear(`${p}self_attn.o_proj`, [hidden, qDim]);
    if (c.qkvBias) {
      add(`${p}self_attn.q_proj.bias`, [qDim]);
      add(`${p}self_attn.k_proj.bias`, [kvDim]);
      add(`${p}self_attn.v_proj.bias`, [kvDim]);
    }
    if (c.oBias) add(`${p}self_attn.o_proj.bias`, [hidden]);
    if (c.qkNorm) {
      add(`${p}self_attn.q_norm.weight`, [c.headDim]);
      add(`${p}self_attn.k_norm.weight`, [c.headDim]);
    }
    add(`${p}post_attention_layernorm.weight`, [hidden]);
    if (c.moe?.sparseLayers[l]) {
      addExpertTensors(c, l, add, linear);
    } else if (c.fusedProjections) {
      linear(`${p}mlp.gate_up_proj`, [2 * c.intermediateSize, hidden]);
    } else {
      linear(`${p}mlp.gate_proj`, [c.intermediateSize, hidden]);
      linear(`${p}mlp.up_proj`, [c.intermediateSize, hidden]);
    }
    if (!c.moe?.sparseLayers[l]) linear(`${p}mlp.down_proj`, [hidden, c.intermediateSize]);
  }
  if (outer.finalNorm) add('model.norm.weight', [hidden]);
  if (outer.lmHead) add('lm_head.weight', [c.vocabParallel?.rows ?? c.vocabSize, hidden]);
  return out;
}

function describe(dtype: DType, shape: readonly number[]): string {
  return `${dtype} [${shape.join(', ')}]`;
}

function sameShape(a: readonly number[], b: readonly number[]): boolean {
  return a.length === b.length && a.every((v, i) => v === b[i]);
}

/**
 * Throws ModelLoadError naming the first tensor of `tensors` (by default the dense families' list) that is missing
 * or has the wrong shape or dtype.
 */
export function validateWeights(config: ModelConfig, source: WeightSource, tensors = expectedTensors(config)): void {
  const names = source.names();
  const checkpoint = names.length > 0 ? basename(dirname(source.info(names[0]!).file)) : 'checkpoint';
  const extra = config.moe ? extraExpertTensor(config, names) : null;
  if (extra !== null) {
    throw new ModelLoadError(source.info(extra).file, `tensor ${extra} names an expert past num_experts ` +
      `(${config.moe!.numExperts} in config.json)`);
  }
  for (const { name, shape, dtype } of tensors) {
    const expected = describe(dtype, shape);
    if (!source.has(name)) {
      throw new ModelLoadError(checkpoint, `missing tensor ${name} (expected ${expected})`);
    }
    const info = source.info(name);
    if (info.dtype !== dtype || !sameShape(info.shape, shape)) {
      throw new ModelLoadError(info.file,
        `tensor ${name} is ${describe(info.dtype, info.shape)}, expected ${expected}`);
    }
    // whole blocks only: the parts fused into one weight keep their scale rows, and each scale covers 128 x 128
    if (dtype === 'f8_e4m3' && shape.some((d) => d % FP8_BLOCK !== 0)) {
      throw new ModelLoadError(info.file, `tensor ${name} is ${expected}; Quire needs both dimensions of a ` +
        `block-FP8 projection to be multiples of ${FP8_BLOCK}`);
    }
  }
}

/** The bf16 parts `names` of `source` quantized to block FP8 on the host (quantizeWeightBlocks), as checkpoint parts. */
function quantizedParts(source: WeightSource, names: readonly string[]): Fp8BlockPart[] {
  return names.map((n) => {
    const t = source.read(n);
    const [N, K] = t.shape as [number, number];
    const { q, scaleInv } = quantizeWeightBlocks(bf16ToF32(f32ToBf16(bytesToF32(t.dtype, t.data))), N, K);
    return {
      weight: { name: n, dtype: 'f8_e4m3', shape: [N, K], data: f32ToBytes('f8_e4m3', q) },
      scaleInv: { name: `${n}_scale_inv`, dtype: 'f32', shape: [N / FP8_BLOCK, K / FP8_BLOCK],
        data: new Uint8Array(scaleInv.buffer) },
    };
  });
}

/** --quantization fp8 on a float checkpoint: what refuses it, or null. */
function onlineFp8Refusal(config: ModelConfig, backend: Backend): string | null {
  if (!backend.uploadFp8Block) return `the ${backend.name} backend cannot run block-FP8 weights (--quantization fp8)`;
  if (config.qkvBias || config.oBias) return '--quantization fp8 with attention biases (Qwen2, attention_bias) is not supported';
  const dims: [string, number][] = [['hidden_size', config.hiddenSize], ['intermediate_size', config.intermediateSize],
    ...(config.moe ? [['moe_intermediate_size', config.moe.expertIntermediateSize] as [string, number]] : []),
    ['num_attention_heads x head_dim', config.numHeads * config.headDim],
    ['num_key_value_heads x head_dim', config.numKvHeads * config.headDim]];
  const bad = dims.find(([, d]) => d % FP8_BLOCK !== 0);
  return bad ? `--quantization fp8 needs every projection dimension a multiple of ${FP8_BLOCK}; ${bad[0]} is ${bad[1]}` : null;
}

export function loadWeights(config: ModelConfig, source: WeightSource, backend: Backend, opts: LoadOptions = {}): ModelWeights {
  validateWeights(config, source);
  if (!backend.uploadFp8Block && expectedTensors(config).some((t) => t.dtype === 'f8_e4m3')) {
    throw new Error(`the ${backend.name} backend cannot run block-FP8 weights (config.json quantization_config)`);
  }
  const quantize = opts.quantization === 'fp8' && config.quantization === null;
  const refusal = quantize ? onlineFp8Refusal(config, backend) : null;
  if (refusal) throw new ModelLoadError('config.json', refusal);
  const upConcat = partsUploader(source, backend);
  const up = (name: string): Tensor => upConcat(name, [name]);
  // a GGUF file's weights as their blocks, or null: where the backend computes on the dequantized values (the CPU
  // backend, the reference), and where a part is not of a block type (an F16 part beside Q4_K ones: the whole
  // projection is then uploaded dequantized, as every weight is without uploadGguf)
  const ggufParts = (weights: string[]): GgufBlocks[] | null => {
    if (!backend.uploadGguf || !source.readGgufBlocks) return null;
    const parts: GgufBlocks[] = [];
    for (const w of weights) {
      const p = source.readGgufBlocks(w);
      if (p === null) return null;
      parts.push(p);
    }
    return parts;
  };
  // the projection `name`, the rows of `modules` concatenated (fused ones share a precision: parseModelConfig)
  const linear = (name: string, modules: string[]): Tensor => {
    const weights = modules.map((m) => `${m}.weight`);
    const gguf = quantize ? null : ggufParts(weights);
    if (gguf) return backend.uploadGguf!(`${name}.weight`, gguf);
    if (quantize) {
      return backend.quantizeFp8Block?.(`${name}.weight`, source, weights)
        ?? backend.uploadFp8Block!(`${name}.weight`, quantizedParts(source, weights));
    }
    return !fp8Module(config, modules[0]!) ? upConcat(`${name}.weight`, weights)
      : backend.uploadFp8Block!(`${name}.weight`, modules.map((m) =>
        ({ weight: source.read(`${m}.weight`), scaleInv: source.read(`${m}.weight_scale_inv`) })));
  };
  const outer = outerTensors(config);
  const embedTokens = outer.embedTokens ? up('model.embed_tokens.weight') : null;
  const layers: LayerWeights[] = [];
  for (let l = 0; l < config.numLayers; l++) {
    const p = layerPrefix(l);
    const attn = `${p}self_attn.`;
    const qkv = linear(`${attn}qkv_proj`,
      (config.fusedProjections ? ['qkv_proj'] : ['q_proj', 'k_proj', 'v_proj']).map((n) => `${attn}${n}`));
    const sparse = config.moe?.sparseLayers[l] ?? false;
    const gateUp = sparse ? null : linear(`${p}mlp.gate_up_proj`,
      (config.fusedProjections ? ['gate_up_proj'] : ['gate_proj', 'up_proj']).map((n) => `${p}mlp.${n}`));
    const experts = !sparse ? null : (() => {
      const { gateUp: gu, down } = expertModules(config, l);
      return { router: up(`${routerModule(config, l)}.weight`), gateUp: linear(`${p}experts.gate_up`, gu),
        down: linear(`${p}experts.down`, down) };
    })();
    const qkvBias = config.qkvBias
      ? upConcat(`${attn}qkv_proj.bias`, ['q_proj', 'k_proj', 'v_proj'].map((n) => `${attn}${n}.bias`)) : null;
    layers.push({
      inputNorm: up(`${p}input_layernorm.weight`),
      qkv,
      qkvBias,
      qNorm: config.qkNorm ? up(`${attn}q_norm.weight`) : null,
      kNorm: config.qkNorm ? up(`${attn}k_norm.weight`) : null,
      o: linear(`${attn}o_proj`, [`${attn}o_proj`]),
      oBias: config.oBias ? up(`${attn}o_proj.bias`) : null,
      postAttentionNorm: up(`${p}post_attention_layernorm.weight`),
      gateUp,
      down: sparse ? null : linear(`${p}mlp.down_proj`, [`${p}mlp.down_proj`]),
      experts,
    });
  }
  const finalNorm = outer.finalNorm ? up('model.norm.weight') : null;
  // an untied lm_head of a GGUF file stays in its blocks where the backend keeps them (not when quantizing to FP8)
  const lmGguf = outer.lmHead && !quantize ? ggufParts(['lm_head.weight']) : null;
  const lmHead = outer.lmHead ? (lmGguf ? backend.uploadGguf!('lm_head.weight', lmGguf) : up('lm_head.weight'))
    : outer.finalNorm ? embedTokens : null;
  return { embedTokens, layers, finalNorm, lmHead };
}
