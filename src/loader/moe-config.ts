// The routing fields of mixture-of-experts configs, read as transformers reads them: Qwen3-MoE (num_experts,
// num_experts_per_tok, moe_intermediate_size, norm_topk_prob, decoder_sparse_step, mlp_only_layers) and Mixtral
// (num_local_experts, num_experts_per_tok; every layer sparse, top-k always renormalized). What Quire does not run
// (a shared expert, as Qwen2-MoE has) is refused here, naming the field.

import { ModelLoadError } from './errors.js';
import type { Architecture, MoeConfig } from './types.js';

type Json = Record<string, unknown>;

function positiveInt(json: Json, file: string, field: string, fallback?: number): number {
  const v = json[field];
  if (v === undefined || v === null) {
    if (fallback !== undefined) return fallback;
    throw new ModelLoadError(file, `field "${field}" is missing`);
  }
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v <= 0) {
    throw new ModelLoadError(file, `field "${field}" must be a positive integer, got ${JSON.stringify(v)}`);
  }
  return v;
}

/** The MoE fields of `json` for a mixture-of-experts architecture; null for a dense one. */
export function parseMoeConfig(architecture: Architecture, json: Json, file: string, numLayers: number,
  intermediateSize: number): MoeConfig | null {
  if (architecture !== 'qwen3_moe' && architecture !== 'mixtral') return null;
  for (const field of ['shared_expert_intermediate_size', 'n_shared_experts', 'num_shared_experts']) {
    const v = json[field];
    if (v !== undefined && v !== null && v !== 0) {
      throw new ModelLoadError(file, `field "${field}" is ${JSON.stringify(v)}: shared experts are not supported`);
    }
  }
  const mixtral = architecture === 'mixtral';
  const numExperts = positiveInt(json, file, mixtral ? 'num_local_experts' : 'num_experts', mixtral ? 8 : undefined);
  const topK = positiveInt(json, file, 'num_experts_per_tok', 2);
  if (topK > numExperts) {
    throw new ModelLoadError(file, `field "num_experts_per_tok" (${topK}) is larger than the number of experts (${numExperts})`);
  }
  const norm = json.norm_topk_prob;
  if (norm !== undefined && norm !== null && typeof norm !== 'boolean') {
    throw new ModelLoadError(file, `field "norm_topk_prob" must be true or false, got ${JSON.stringify(norm)}`);
  }
  if (mixtral) {
    return { numExperts, topK, expertIntermediateSize: intermediateSize, renormalize: true,
      sparseLayers: Array(numLayers).fill(true) as boolean[] };
  }
  const step = positiveInt(json, file, 'decoder_sparse_step', 1);
  const mlpOnly = json.mlp_only_layers ?? [];
  if (!Array.isArray(mlpOnly) || !mlpOnly.every((l) => Number.isSafeInteger(l) && l >= 0 && l < numLayers)) {
    throw new ModelLoadError(file, `field "mlp_only_layers" must be a list of layer indices below ${numLayers}, got ${JSON.stringify(mlpOnly)}`);
  }
  return {
    numExperts, topK,
    expertIntermediateSize: positiveInt(json, file, 'moe_intermediate_size'),
    // transformers' Qwen3MoeConfig defaults it to false
    renormalize: norm === true,
    // transformers' Qwen3MoeDecoderLayer: sparse unless listed in mlp_only_layers, on every decoder_sparse_step-th
    sparseLayers: Array.from({ length: numLayers }, (_, l) => !(mlpOnly as number[]).includes(l) && (l + 1) % step === 0),
  };
}
