// What --speculative-config '{"method": "mtp", ...}' needs of the target before anything loads: a family whose
// checkpoints carry a multi-token-prediction head Quire runs (Qwen3.5 / Qwen3.6 and their MoE variant, Qwen3-Next), a
// checkpoint that has it (mtp.*, the layer count its config declares), one device (no tensor or pipeline
// parallelism). Refused naming the field or the tensor at fault, never by a step that fails later.

import { isHybridArchitecture } from '../../loader/hybrid-config.js';
import type { ModelDir } from '../../loader/model-dir.js';
import type { ModelConfig, WeightSource } from '../../loader/types.js';
import type { ResolvedEngineOptions } from '../options.js';
import { MTP_PREFIX } from '../../model/architectures/qwen3_5-mtp-weights.js';

/** Why the engine's --speculative-config (its mtp method; null for any other) cannot run on this target, or null. */
export function mtpRefusal(dir: Pick<ModelDir, 'config' | 'weights'>,
  options: Pick<ResolvedEngineOptions, 'speculativeConfig' | 'tensorParallelSize' | 'pipelineParallelSize'>): string | null {
  if (options.speculativeConfig?.method !== 'mtp') return null;
  const why = refusal(dir.config, dir.weights, options.tensorParallelSize, options.pipelineParallelSize);
  return why === null ? null : `--speculative-config: method "mtp": ${why}`;
}

function refusal(config: ModelConfig, weights: Pick<WeightSource, 'has'>, tensorParallelSize: number,
  pipelineParallelSize: number): string | null {
  if (!isHybridArchitecture(config.architecture)) {
    return `${config.architecture} checkpoints carry no multi-token-prediction head Quire runs (Qwen3.5 / Qwen3.6 and Qwen3-Next ones do)`;
  }
  const declared = config.hybrid!.mtp;
  if (declared?.numLayers === 0) return `the checkpoint has no MTP head (${declared.field} is 0)`;
  if (declared !== undefined && declared.numLayers > 1) {
    return `${declared.field} is ${declared.numLayers}; Quire runs an MTP head of one layer (every published checkpoint's)`;
  }
  if (declared?.dedicatedEmbeddings) {
    return `${declared.field.replace(/[a-z_]+$/, 'mtp_use_dedicated_embeddings')} is true; an MTP head with embeddings of its own is not supported`;
  }
  const fc = `${MTP_PREFIX}fc.weight`;
  if (!weights.has(fc)) {
    const field = declared ? `${declared.field} is ${declared.numLayers}` : 'config.json declares none either';
    return `the checkpoint has no MTP head (no ${MTP_PREFIX}* tensors: ${fc} is missing; ${field})`;
  }
  if (tensorParallelSize > 1) return `the head runs on one device; --tensor-parallel-size is ${tensorParallelSize}`;
  // the head reads the last layer's hidden states and embeds with the first stage's table: one stage holds both
  if (pipelineParallelSize > 1) {
    return `the head runs on one device; --pipeline-parallel-size is ${pipelineParallelSize} (pipeline parallelism ` +
      'and MTP speculative decoding do not combine)';
  }
  return null;
}
