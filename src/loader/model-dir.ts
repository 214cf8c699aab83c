import { existsSync, readFileSync, readdirSync, statSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { chatTemplateFromConfig } from './chat-template.js';
import { loadModelConfig } from './config.js';
import { ModelLoadError } from './errors.js';
import { resolveModelPath } from './hub-cache.js';
import { loadGenerationConfig } from './generation-config.js';
import { openSafetensors, openShardedSafetensors } from './safetensors.js';
import { loadTokenizer, readJsonFile, specialTokenContent, tokenizerFromJson } from './tokenizer.js';
import type { GenerationDefaults, ModelConfig, Tokenizer, WeightSource } from './types.js';
import { GGUF_SHARD, GgufFile } from './gguf.js';
import { ggufModelConfig, ggufPermutesQk, ggufQuantizationName } from './gguf-config.js';
import { ggufTokenizerFiles } from './gguf-tokenizer.js';
import { ggufWeightSource } from './gguf-weights.js';

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
  /** The tokenizer.json object where it came from no file (a GGUF file's metadata); else read it from tokenizerDir. */
  tokenizerJson?: Record<string, unknown>;
  /** A GGUF model's quantization as llama.cpp names its files (ggufQuantizationName: "q4_k_m"); absent otherwise. */
  ggufFileType?: string;
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

/** A .gguf file, or a directory with no config.json holding exactly one: the file; else null (a Hugging Face directory). */
export function ggufPath(path: string): string | null {
  if (!existsSync(path)) return null;
  if (!statSync(path).isDirectory()) return path.endsWith('.gguf') ? path : null;
  if (existsSync(join(path, 'config.json'))) return null;
  const files = readdirSync(path).filter((f) => f.endsWith('.gguf')).sort();
  // one split model's shards (<base>-0000k-of-0000n.gguf): its first, which opens them all
  const shards = files.map((f) => GGUF_SHARD.exec(f));
  if (files.length > 1 && shards.every((m) => m !== null && m[1] === shards[0]![1] && m[3] === shards[0]![3])) return join(path, files[0]!);
  if (files.length > 1) {
    throw new ModelLoadError(path, `holds ${files.length} GGUF files (${files.join(', ')}) and no config.json, and they are not ` +
      'the shards of one split model: name the file to load');
  }
  return files.length === 1 ? join(path, files[0]!) : null;
}

/**
 * A GGUF file (llama.cpp's format): config, weights, tokenizer and chat template all from the file, unless
 * --tokenizer names a Hugging Face directory whose tokenizer and chat template are used instead.
 */
export async function loadGgufModel(fileArg: string, opts: ModelDirOptions = {}): Promise<ModelDir> {
  const file = resolve(fileArg);
  const gguf = await GgufFile.open(file);
  const config = ggufModelConfig(gguf, opts.hfOverrides ?? null);
  const weights = ggufWeightSource(gguf, config, ggufPermutesQk(String(gguf.metadata.get('general.architecture'))));
  if (opts.tokenizer) {
    const tokDir = resolve(resolveModelPath(opts.tokenizer));
    const dir = loadModelDirTokenizer(tokDir);
    if (gguf.metadata.has('tokenizer.ggml.tokens')) checkGgufTokens(gguf, dir.tokenizer, tokDir);
    return { dir: file, config, weights, ...dir, ggufFileType: ggufQuantizationName(gguf) };
  }
  const t = ggufTokenizerFiles(gguf);
  const tokenizer = tokenizerFromJson(t.tokenizerJson, t.tokenizerConfig, file);
  return {
    dir: file, tokenizerDir: file, config, weights, tokenizer, chatTemplate: t.chatTemplate,
    generation: { eosTokenIds: t.eosTokenIds, bosTokenId: t.bosTokenId },
    bosToken: t.bosToken, eosToken: t.eosToken, tokenizerJson: t.tokenizerJson, ggufFileType: ggufQuantizationName(gguf),
  };
}

/**
 * --tokenizer beside a GGUF that carries its own: the two must be one vocabulary (every id the same token; the GGUF's
 * "[PAD<id>]" padding past the tokenizer's ids aside), else the weights would be read with another model's ids.
 */
function checkGgufTokens(gguf: GgufFile, tokenizer: Tokenizer, tokDir: string): void {
  const ours = gguf.metadata.get('tokenizer.ggml.tokens') as string[];
  const n = Math.max(ours.length, tokenizer.vocabSize);
  for (let id = 0; id < n; id++) {
    const [a, b] = [ours[id], tokenizer.idToToken(id)];
    if (a === b || (b === undefined && a === `[PAD${id}]`)) continue;
    throw new ModelLoadError(gguf.file, `--tokenizer ${tokDir}: token id ${id} is ${JSON.stringify(b ?? null)} there and `
      + `${JSON.stringify(a ?? null)} in the file's tokenizer.ggml.tokens: not this model's tokenizer`);
  }
}

function loadModelDirTokenizer(tokDir: string): Omit<ModelDir, 'dir' | 'config' | 'weights'> {
  const tokenizer = loadTokenizer(tokDir);
  const tokenizerConfigFile = join(tokDir, 'tokenizer_config.json');
  const tokenizerConfig = existsSync(tokenizerConfigFile) ? readJsonFile(tokenizerConfigFile) : {};
  return {
    tokenizerDir: tokDir, tokenizer, chatTemplate: readChatTemplate(tokDir, tokenizerConfig.chat_template),
    generation: { eosTokenIds: tokenizer.eosTokenIds, bosTokenId: tokenizer.bosTokenId },
    bosToken: specialTokenContent(tokenizerConfig.bos_token), eosToken: specialTokenContent(tokenizerConfig.eos_token),
  };
}

/** A model directory or repo id (loadModelDir), or a GGUF file or a directory holding one (loadGgufModel). */
export async function loadModel(pathArg: string, opts: ModelDirOptions = {}): Promise<ModelDir> {
  const gguf = ggufPath(resolve(resolveModelPath(pathArg)));
  return gguf !== null ? loadGgufModel(gguf, opts) : loadModelDir(pathArg, opts);
}
