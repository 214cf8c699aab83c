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
  /** Where the tokenizer files came from: dir, or --tokenizer's. */
  tokenizerDir: string;
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

export interface ModelDirOptions {
  /** Fields that replace config.json's (vLLM's --hf-overrides). */
  hfOverrides?: Record<string, unknown> | null;
  /** Where tokenizer.json, tokenizer_config.json and the chat template come from (vLLM's --tokenizer); default the model's. */
  tokenizer?: string | null;
}

/**
 * A Hugging Face model directory (or a repo id in the local Hugging Face cache: hub-cache.ts): config.json,
 * tokenizer files, safetensors weights, generation_config.json.
 */
export function loadModelDir(dirArg: string, opts: ModelDirOptions = {}): ModelDir {
  const dir = resolve(resolveModelPath(dirArg));
  if (!existsSync(dir) || !statSync(dir).isDirectory()) throw new ModelLoadError(dir, `model directory ${dir} not found`);
  const tokDir = opts.tokenizer ? resolve(resolveModelPath(opts.tokenizer)) : dir;
  for (const [folder, required] of [[dir, 'config.json'], [tokDir, 'tokenizer.json']] as const) {
    const file = join(folder, required);
    if (!existsSync(file)) throw new ModelLoadError(file, `file not found in ${folder}`);
  }
  const config = loadModelConfig(join(dir, 'config.json'), opts.hfOverrides ?? null);
  const weights = openWeights(dir);
  const tokenizer = loadTokenizer(tokDir);
  const tokenizerConfigFile = join(tokDir, 'tokenizer_config.json');
  const tokenizerConfig = existsSync(tokenizerConfigFile) ? readJsonFile(tokenizerConfigFile) : {};
  const fromFile = loadGenerationConfig(join(dir, 'generation_config.json'));
  const eosTokenIds = [...new Set([...fromFile.eosTokenIds, ...tokenizer.eosTokenIds])];
  return {
    dir,
    tokenizerDir: tokDir,
    config,
    weights,
    tokenizer,
    chatTemplate: readChatTemplate(tokDir, tokenizerConfig.chat_template),
    generation: { ...fromFile, eosTokenIds, bosTokenId: fromFile.bosTokenId ?? tokenizer.bosTokenId },
    bosToken: specialTokenContent(tokenizerConfig.bos_token),
    eosToken: specialTokenContent(tokenizerConfig.eos_token),
  };
}
