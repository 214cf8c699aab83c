// config.json's architectures -> the builder of that family's layers (vLLM's model registry). Adding an
// architecture: its file in architectures/ and one line here (and, while config parsing lives in loader/config.ts,
// its family there: a test checks the two lists agree).

import type { Backend } from '../backend/backend.js';
import type { ModelConfig, WeightSource } from '../loader/types.js';
import { buildDecoder } from './architectures/dense.js';
import { buildQwen35 } from './architectures/qwen3_5.js';
import type { ModelParts } from './model.js';
import type { LoadOptions } from './load-options.js';

export type ArchitectureBuilder = (config: ModelConfig, source: WeightSource, backend: Backend, opts: LoadOptions) => ModelParts;

/** Keyed by ModelConfig.architecture (the family loader/config.ts names from config.json's architectures). */
export const ARCHITECTURE_BUILDERS: Readonly<Record<ModelConfig['architecture'], ArchitectureBuilder>> = {
  qwen3: buildDecoder,
  qwen2: buildDecoder,
  llama: buildDecoder,
  mistral: buildDecoder,
  phi3: buildDecoder,
  qwen3_moe: buildDecoder,
  mixtral: buildDecoder,
  qwen3_5: buildQwen35,
  qwen3_5_moe: buildQwen35,
  qwen3_next: buildQwen35,
};

export function architectureBuilder(config: ModelConfig): ArchitectureBuilder {
  const build = ARCHITECTURE_BUILDERS[config.architecture];
  if (!build) throw new Error(`no model builder for architecture ${config.architecture}`);
  return build;
}
