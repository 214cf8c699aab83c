// Whether a checkpoint's weights fit the device before any is uploaded: the bytes they will take there (in the
// backend's compute dtype; block-FP8 projections a byte an element plus their scales; with --quantization fp8 every
// projection so; a GGUF file's projections kept as their blocks, their stored bytes) against what
// --gpu-memory-utilization leaves. A 61 GB bf16 mixture of experts on a 40 GB card is refused in a second with the
// numbers and the flags to change, not after minutes of uploading; a Q4_K_M file whose bf16 weights would not fit,
// but whose blocks do, starts.

import { BYTES_PER_ELEMENT } from '../loader/dtype.js';
import type { DType, ModelConfig } from '../loader/types.js';
import { FP8_BLOCK } from '../backend/fp8-linear.js';
import { expectedTensors } from './architectures/dense-weights.js';
import { qwen35ExpectedTensors } from './architectures/qwen3_5-weights.js';

/** Projection weights (what --quantization fp8 quantizes): *_proj and Mixtral's expert w1/w2/w3. */
const PROJECTION = /(?:_proj|\.w[123])\.weight$/;

/** A GGUF tensor's bytes as its blocks where the loader would keep them so, else null (WeightSource.ggufBlockBytes). */
export type GgufBlockBytes = (name: string) => number | null;

/**
 * Bytes the weights take on a backend computing in `computeDType` (quantizeFp8: --quantization fp8 at load;
 * ggufBlockBytes: a GGUF source's, where the backend keeps its blocks).
 */
export function deviceWeightBytes(config: ModelConfig, computeDType: DType, quantizeFp8: boolean,
  ggufBlockBytes: GgufBlockBytes | null = null): number {
  let bytes = 0;
  const blocks = ggufBlockBytes && !quantizeFp8 && !config.hybrid ? keptGgufBlocks(config, ggufBlockBytes) : null;
  // a hybrid model's own tensors (DeltaNet layers, shared experts), the layer kinds layer_types gives
  for (const t of config.hybrid ? qwen35ExpectedTensors(config) : expectedTensors(config)) {
    const n = t.shape.reduce((a, b) => a * b, 1);
    const kept = blocks?.get(t.name);
    if (kept !== undefined) {
      bytes += kept;
    } else if (t.dtype === 'f8_e4m3' || t.name.endsWith('_scale_inv')) {
      bytes += n * BYTES_PER_ELEMENT[t.dtype];
    } else if (quantizeFp8 && PROJECTION.test(t.name)) {
      bytes += n + 4 * Math.ceil(t.shape[0]! / FP8_BLOCK) * Math.ceil(t.shape[1]! / FP8_BLOCK);
    } else {
      bytes += n * BYTES_PER_ELEMENT[computeDType];
    }
  }
  return bytes;
}

/**
 * The projections (and an untied lm_head) the loader keeps as GGUF blocks, with their bytes: a fused projection's
 * parts (q, k, v; gate, up) all of a block type, or none kept (architectures/dense-weights.ts's linear).
 */
function keptGgufBlocks(config: ModelConfig, blockBytes: GgufBlockBytes): Map<string, number> {
  const groups = new Map<string, string[]>();
  for (const { name } of expectedTensors(config)) {
    if (!PROJECTION.test(name) && name !== 'lm_head.weight') continue;
    const fused = name.replace(/self_attn\.[qkv]_proj\./, 'self_attn.qkv.').replace(/mlp\.(?:gate|up)_proj\./, 'mlp.gate_up.');
    groups.set(fused, [...groups.get(fused) ?? [], name]);
  }
  const kept = new Map<string, number>();
  for (const names of groups.values()) {
    const bytes = names.map(blockBytes);
    if (bytes.every((b) => b !== null)) names.forEach((n, i) => kept.set(n, bytes[i]!));
  }
  return kept;
}

const gb = (bytes: number): string => `${(bytes / 1e9).toFixed(1)} GB`;

/**
 * Why the weights cannot fit, or null. `budgetBytes`: what the engine may hold before loading (the device's memory
 * times --gpu-memory-utilization, less the activation reserve: MemoryReport.availableKvBytes before the load).
 * `fp8Runs`: whether the backend runs this model in block FP8 (else --quantization fp8 is not offered).
 */
export function weightFitRefusal(config: ModelConfig, computeDType: DType, quantizeFp8: boolean,
  m: { budgetBytes: number; totalBytes: number; gpuMemoryUtilization: number }, fp8Runs = true,
  ggufBlockBytes: GgufBlockBytes | null = null): string | null {
  const need = deviceWeightBytes(config, computeDType, quantizeFp8, ggufBlockBytes);
  if (need <= m.budgetBytes) return null;
  const fp8 = fp8Runs && config.quantization === null && !quantizeFp8 ? deviceWeightBytes(config, computeDType, true) : null;
  const ways = [
    fp8 !== null && fp8 < m.budgetBytes ? `--quantization fp8 (block FP8 weights: ${gb(fp8)})` : null,
    m.gpuMemoryUtilization < 0.95 ? `a higher --gpu-memory-utilization (now ${m.gpuMemoryUtilization})` : null,
    'a GPU with more memory',
  ].filter((w) => w !== null);
  const kept = ggufBlockBytes && !quantizeFp8 && need < deviceWeightBytes(config, computeDType, false);
  const held = config.quantization || quantizeFp8 ? 'block FP8' : kept ? `GGUF blocks, the rest ${computeDType}` : computeDType;
  return `the model's weights need ${gb(need)} on the device (${held}), ` +
    `more than the ${gb(m.budgetBytes)} that --gpu-memory-utilization ${m.gpuMemoryUtilization} leaves of this GPU's ` +
    `${gb(m.totalBytes)} after activations; use ${ways.join(', or ')}`;
}
