import { existsSync, readFileSync, statSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { chatTemplateFromConfig } from './chat-template.js';
import { loadModelConfig } from './config.js';
import { ModelLoadError } from './errors.js';
import { resolveModelPath } from './hub-cache.js';
import { loadGenerationConfig } from './generation-config.js';
import { openSafetensors, openShardedSafetensors } from './safetensors.js';
import { loadTokenizer, readJsonFile, specialTokenContent } from './tokenizer.js';
import type { GenerationDefaults, ModelConfig, Tokenizer, WeightSource } from './types.js';

export interface ModelDir {
  dir: string;
  config: ModelConfig;
  weights: WeightSource;
  tokenizer: Tokenizer;
  chatTemplate: string | null;
  /** generation_config.json, with eos ids merged with the tokenizer's (generation_config first). */
  generation: GenerationDefaults;
  bosToken: string | null;
  eosToken: string | null;
}

export function openWeights(dir: string): WeightSource {
  const index = join(dir, 'model.safetensors.index.json');
  if (existsSync(index)) return openShardedSafetensors(index);
  const single = join(dir, 'model.safetensors');
  if (existsSync(single)) return openSafetensors(single);
  throw new ModelLoadError(single, `file not found in ${dir} (nor model.safetensors.index.json)`);
}

/** chat_template.jinja (newer checkpoints) wins over tokenizer_config's chat_template. */
function readChatTemplate(dir: string, fromConfig: unknown): string | null {
  const file = join(dir, 'chat_template.jinja');
  return existsSync(file) ? readFileSync(file, 'utf8') : chatTemplateFromConfig(fromConfig);
}

/**
 * A Hugging Face model directory (or a repo id in the local Hugging Face cache: hub-cache.ts): config.json,
 * tokenizer files, safetensors weights, generation_config.json.
 */
/** `hfOverrides`: fields that replace config.json's (vLLM's --hf-overrides). */
export function loadModelDir(dirArg: string, hfOverrides: Record<string, unknown> | null = null): ModelDir {
  const dir = resolve(resolveModelPath(dirArg));
  if (!existsSync(dir) || !statSync(dir).isDirectory()) throw new ModelLoadError(dir, `model directory ${dir} not found`);
  for (const required of ['config.json', 'tokenizer.json']) {
    const file = join(dir, required);
    if (!existsSync(file)) throw new ModelLoadError(file, `file not found in ${dir}`);
  }
  const config = loadModelConfig(join(dir, 'config.json'), hfOverrides);
  const weights = openWeights(dir);
  const tokenizer = loadTokenizer(dir);
  const tokenizerConfigFile = join(dir, 'tokenizer_config.json');
  const tokenizerConfig = existsSync(tokenizerConfigFile) ? readJsonFile(tokenizerConfigFile) : {};
  const fromFile = loadGenerationConfig(join(dir, 'generation_config.json'));
  const eosTokenIds = [...new Set([...fromFile.eosTokenIds, ...tokenizer.eosTokenIds])];
  return {
    dir,
    config,
    weights,
    tokenizer,
    chatTemplate: readChatTemplate(dir, tokenizerConfig.chat_template),
    generation: { ...fromFile, eosTokenIds, bosTokenId: fromFile.bosTokenId ?? tokenizer.bosTokenId },
    bosToken: specialTokenContent(tokenizerConfig.bos_token),
    eosToken: specialTokenContent(tokenizerConfig.eos_token),
  };
}
