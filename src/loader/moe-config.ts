// The routing fields of mixture-of-experts configs, read as transformers reads them: Qwen3-MoE (num_experts,
// num_experts_per_tok, moe_intermediate_size, norm_topk_prob, decoder_sparse_step, mlp_only_layers), Mixtral
// (num_local_experts, num_experts_per_tok; every layer sparse, top-k always renormalized), and the families with a
// shared expert (shared_expert_intermediate_size): Qwen3-Next (Qwen2-MoE's sparse block: the Qwen3-MoE fields,
// norm_topk_prob defaulting to true) and Qwen3.5-MoE (every layer sparse, top-k always renormalized: its config drops
// norm_topk_prob, decoder_sparse_step and mlp_only_layers). What Quire does not run is refused here, naming the field.

import { ModelLoadError } from './errors.js';
import type { Architecture, LocalExperts, MoeConfig } from './types.js';

type Json = Record<string, unknown>;

/** transformers' defaults of the shared-expert families (Qwen3NextConfig, Qwen3_5MoeTextConfig). */
const SHARED_EXPERT_DEFAULTS: Readonly<Record<string, { numExperts: number; topK: number }>> = {
  qwen3_next: { numExperts: 512, topK: 10 },
  qwen3_5_moe: { numExperts: 256, topK: 8 },
};

/** The MoE fields of `json` for a mixture-of-experts architecture; null for a dense one. `prefix` names nested fields. */
export function parseMoeConfig(architecture: Architecture, json: Json, file: string, numLayers: number,
  intermediateSize: number, prefix = ''): MoeConfig | null {
  if (architecture !== 'qwen3_moe' && architecture !== 'mixtral' && architecture !== 'qwen3_next' && architecture !== 'qwen3_5_moe') {
    return null;
  }
  const fail = (field: string, problem: string): never => {
    throw new ModelLoadError(file, `field "${prefix}${field}" ${problem}`);
  };
  const given = (field: string): boolean => json[field] !== undefined && json[field] !== null;
  const positiveInt = (field: string, fallback?: number): number => {
    const v = json[field];
    if (v === undefined || v === null) return fallback ?? fail(field, 'is missing');
    if (typeof v !== 'number' || !Number.isSafeInteger(v) || v <= 0) fail(field, `must be a positive integer, got ${JSON.stringify(v)}`);
    return v as number;
  };
  const norm = json.norm_topk_prob as boolean | null | undefined;
  if (norm !== undefined && norm !== null && typeof norm !== 'boolean') fail('norm_topk_prob', `must be true or false, got ${JSON.stringify(norm)}`);
  const mlpOnly = json.mlp_only_layers ?? [];
  if (!Array.isArray(mlpOnly) || !mlpOnly.every((l) => Number.isSafeInteger(l) && l >= 0 && l < numLayers)) {
    fail('mlp_only_layers', `must be a list of layer indices below ${numLayers}, got ${JSON.stringify(mlpOnly)}`);
  }
  const defaults = SHARED_EXPERT_DEFAULTS[architecture];
  if (defaults === undefined) {
    for (const field of ['shared_expert_intermediate_size', 'n_shared_experts', 'num_shared_experts']) {
      if (given(field) && json[field] !== 0) fail(field, `is ${JSON.stringify(json[field])}: shared experts are not supported for ${architecture}`);
    }
  }
  const mixtral = architecture === 'mixtral';
  const numExperts = positiveInt(mixtral ? 'num_local_experts' : 'num_experts', mixtral ? 8 : defaults?.numExperts);
  const topK = positiveInt('num_experts_per_tok', defaults?.topK ?? 2);
  if (topK > numExperts) fail('num_experts_per_tok', `(${topK}) is larger than the number of experts (${numExperts})`);
  if (mixtral) {
    return { numExperts, topK, expertIntermediateSize: intermediateSize, renormalize: true, sharedExpertIntermediateSize: null,
      sparseLayers: Array(numLayers).fill(true) as boolean[] };
  }
  const expertIntermediateSize = positiveInt('moe_intermediate_size', defaults ? 512 : undefined);
  const sharedExpertIntermediateSize = defaults ? positiveInt('shared_expert_intermediate_size', 512) : null;
  if (architecture === 'qwen3_5_moe') {
    // transformers' Qwen3_5MoeTextConfig deletes these fields: its router always renormalizes and every layer is
    // sparse. A config that sets them otherwise says something transformers would not do, so it is refused.
    const ignored = '(transformers ignores the field)';
    if (norm === false) fail('norm_topk_prob', `is false; Qwen3.5-MoE's router always renormalizes its top-k ${ignored}`);
    const step = json.decoder_sparse_step ?? 1;
    if (step !== 1) fail('decoder_sparse_step', `is ${JSON.stringify(step)}; every Qwen3.5-MoE layer is sparse ${ignored}`);
    if ((mlpOnly as number[]).length > 0) fail('mlp_only_layers', `is ${JSON.stringify(mlpOnly)}; every Qwen3.5-MoE layer is sparse ${ignored}`);
    return { numExperts, topK, expertIntermediateSize, renormalize: true, sharedExpertIntermediateSize,
      sparseLayers: Array(numLayers).fill(true) as boolean[] };
  }
  const step = positiveInt('decoder_sparse_step', 1);
  return {
    numExperts, topK, expertIntermediateSize,
    // transformers' Qwen3MoeConfig defaults it to false, Qwen3NextConfig to true
    renormalize: norm ?? architecture === 'qwen3_next',
    sharedExpertIntermediateSize,
    // transformers' Qwen3MoeDecoderLayer (and Qwen3-Next's): sparse unless listed in mlp_only_layers, on every
    // decoder_sparse_step-th layer
    sparseLayers: Array.from({ length: numLayers }, (_, l) => !(mlpOnly as number[]).includes(l) && (l + 1) % step === 0),
  };
}

/** The global ids of the experts a config's model holds, in local slot order: all of them unless expert-parallel. */
export function heldExperts(moe: MoeConfig): number[] {
  const l = moe.localExperts;
  if (!l) return Array.from({ length: moe.numExperts }, (_, e) => e);
  return Array.from({ length: l.count }, (_, j) => l.first + j * l.stride);
}

/** Global expert e's local slot under `local`, or -1 where this rank does not hold it (vLLM's expert_map). */
export function localExpertSlot(local: LocalExperts, e: number): number {
  const d = e - local.first;
  if (d < 0 || d % local.stride !== 0) return -1;
  const j = d / local.stride;
  return j < local.count ? j : -1;
}
