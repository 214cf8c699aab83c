// An in-memory WeightSource of seeded random weights for any ModelConfig (tests,
// benchmarks). Each tensor is generated on read from a seed derived from its
// name, so reading it twice gives the same bytes and nothing is held in memory.
// A block-FP8 config's projections are the same config's unquantized weights, quantized as a checkpoint stores them.

import { bytesToF32, f32ToBytes } from '../loader/dtype.js';
import type { DType, FloatDType, HostTensor, ModelConfig, WeightSource } from '../loader/types.js';
import { quantizeWeightBlocks } from '../backend/fp8-linear.js';
import { expectedTensors } from './architectures/dense-weights.js';
import { qwen35ExpectedTensors } from './architectures/qwen3_5-weights.js';
import { mtpExpectedTensors } from './architectures/qwen3_5-mtp-weights.js';

function hashName(name: string, seed: number): number {
  let h = (0x811c9dc5 ^ seed) >>> 0;
  for (let i = 0; i < name.length; i++) h = Math.imul(h ^ name.charCodeAt(i), 0x01000193) >>> 0;
  return h;
}

/** mulberry32: uniform in [0, 1). */
export function seededRandom(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function toBytes(dtype: DType, values: Float32Array): Uint8Array {
  if (dtype !== 'bf16') return f32ToBytes(dtype, values);
  const bits = new Uint32Array(values.buffer, values.byteOffset, values.length);
  const half = new Uint16Array(values.length);
  for (let i = 0; i < half.length; i++) half[i] = bits[i]! >>> 16;
  return new Uint8Array(half.buffer);
}

export interface RandomWeightOptions {
  seed?: number;
  /** Overrides or adds tensors (e.g. a wrong shape, for validation tests). */
  overrides?: Record<string, { dtype: DType; shape: number[] } | null>;
  file?: string;
}

export function randomWeightSource(config: ModelConfig, opts: RandomWeightOptions = {}): WeightSource {
  const seed = opts.seed ?? 0;
  const file = opts.file ?? '/models/random/model.safetensors';
  const infos = new Map<string, { dtype: DType; shape: number[] }>();
  // a hybrid config that declares an MTP head has one, as its checkpoints do
  const mtp = (config.hybrid?.mtp?.numLayers ?? 0) > 0 ? mtpExpectedTensors(config) : [];
  const tensors = config.hybrid ? [...qwen35ExpectedTensors(config), ...mtp] : expectedTensors(config);
  for (const t of tensors) infos.set(t.name, { dtype: t.dtype, shape: t.shape });
  for (const [name, info] of Object.entries(opts.overrides ?? {})) {
    if (info) infos.set(name, info);
    else infos.delete(name);
  }
  const info = (name: string): { dtype: DType; shape: number[]; file: string } => {
    const i = infos.get(name);
    if (!i) throw new Error(`no tensor ${name}`);
    return { ...i, shape: [...i.shape], file };
  };
  const values = (name: string, shape: number[]): Float32Array => {
    const rand = seededRandom(hashName(name, seed));
    const out = new Float32Array(shape.reduce((a, b) => a * b, 1));
    if (name.endsWith('.bias')) {
      for (let i = 0; i < out.length; i++) out[i] = 0.5 * (2 * rand() - 1);
    } else if (shape.length === 1) {
      for (let i = 0; i < out.length; i++) out[i] = 0.8 + 0.4 * rand();
    } else {
      const bound = name.includes('embed_tokens') ? 1 : Math.sqrt(3 / shape[1]!);
      for (let i = 0; i < out.length; i++) out[i] = bound * (2 * rand() - 1);
    }
    return out;
  };
  return {
    names: () => [...infos.keys()],
    has: (name) => infos.has(name),
    info,
    read(name): HostTensor {
      const { dtype, shape } = info(name);
      const weight = name.endsWith('_scale_inv') ? name.slice(0, -'_scale_inv'.length) : null;
      if (dtype !== 'f8_e4m3' && weight === null) return { name, dtype, shape, data: toBytes(dtype, values(name, shape)) };
      // block FP8: the weight of config.dtype, quantized; its scales read beside it
      const [N, K] = info(weight ?? name).shape as [number, number];
      const w = bytesToF32(config.dtype, toBytes(config.dtype, values(weight ?? name, [N, K])));
      const { q, scaleInv } = quantizeWeightBlocks(w, N, K);
      return { name, dtype, shape, data: f32ToBytes(dtype, weight === null ? q : scaleInv) };
    },
  };
}

/** Qwen3-0.6B's shape (tied embeddings, q/k norm). */
export function qwen3_0_6bConfig(dtype: FloatDType = 'bf16'): ModelConfig {
  return {
    architecture: 'qwen3', vocabSize: 151936, hiddenSize: 1024, intermediateSize: 3072, numLayers: 28,
    numHeads: 16, numKvHeads: 8, headDim: 128, maxPositionEmbeddings: 40960, rmsNormEps: 1e-6,
    ropeTheta: 1000000, ropeScaling: null, tieWordEmbeddings: true, qkNorm: true, qkvBias: false, oBias: false, slidingWindow: null,
    fusedProjections: false, dtype, quantization: null, moe: null, hybrid: null,
  };
}

/** A small model of a family (qwen2: q, k, v biases; llama: llama3 RoPE scaling), for tests and quick benchmarks. */
export function tinyConfig(architecture: 'qwen3' | 'qwen2' | 'llama', overrides: Partial<ModelConfig> = {}): ModelConfig {
  return {
    architecture, vocabSize: 97, hiddenSize: 64, intermediateSize: 96, numLayers: 2, numHeads: 4,
    numKvHeads: 2, headDim: 16, maxPositionEmbeddings: 512, rmsNormEps: 1e-6, ropeTheta: 10000,
    ropeScaling: architecture === 'llama'
      ? { type: 'llama3', factor: 8, lowFreqFactor: 1, highFreqFactor: 4, originalMaxPositionEmbeddings: 64 }
      : null,
    tieWordEmbeddings: architecture !== 'llama', qkNorm: architecture === 'qwen3', qkvBias: architecture === 'qwen2',
    oBias: false, slidingWindow: null, fusedProjections: false, dtype: 'bf16', quantization: null, moe: null, hybrid: null, ...overrides,
  };
}
