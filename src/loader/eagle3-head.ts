// An EAGLE-3 head's directory (--speculative-config '{"method": "eagle3", "model": DIR, ...}'), in the format the
// published heads share (yuhuili/EAGLE3-LLaMA3.1-Instruct-8B, AngelSlim/Qwen3-8B_eagle3, Tengyunw/qwen3_8b_eagle3)
// and vLLM's Eagle3LlamaForCausalLM reads:
//   config.json         architectures LlamaForCausalLMEagle3 (or Eagle3LlamaForCausalLM); a Llama config of its one
//                       decoder layer (hidden_size the target's, heads, rope, rms_norm_eps), vocab_size the target's,
//                       draft_vocab_size (its lm_head's rows, default vocab_size), eagle_aux_hidden_state_layer_ids
//                       (top level or in eagle_config: which target layers' inputs it reads; default vLLM's), and
//                       norm_before_residual (default false)
//   model.safetensors   fc, midlayer.*, norm, lm_head, optional embed_tokens, and d2t / t2d (I64 / BOOL: d2t[i] is
//                       draft id i's offset to its target id; t2d is not needed to propose and is not read)
// This file reads and checks the directory on its own; what the head needs of the target (its hidden size, layers,
// KV shape) is model/eagle3-weights.ts'.

import { existsSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { parseModelConfig } from './config.js';
import { ModelLoadError, describeError } from './errors.js';
import { resolveModelPath } from './hub-cache.js';
import { openIndexedSafetensors } from './safetensors.js';
import type { ModelConfig, WeightSource } from './types.js';

/** The architectures names an EAGLE-3 head's config.json may give (vLLM registers both for Eagle3LlamaForCausalLM). */
export const EAGLE3_ARCHITECTURES = ['LlamaForCausalLMEagle3', 'Eagle3LlamaForCausalLM'] as const;

export interface Eagle3HeadDir {
  dir: string;
  /** Its decoder layer's sizes, as a Llama config's (vocabSize: the target vocabulary its embed_tokens would have). */
  config: ModelConfig;
  /** Rows of its lm_head: the draft vocabulary. */
  draftVocabSize: number;
  /** The target layers whose inputs it reads (eagle_aux_hidden_state_layer_ids), or null: vLLM's default. */
  auxLayerIds: number[] | null;
  /** vLLM's norm_before_residual: the residual stream starts from the normed hidden state, not the raw one. */
  normBeforeResidual: boolean;
  weights: WeightSource;
  /** Draft id -> target id (i + d2t[i]), or null where the checkpoint has no d2t: the draft id is the target id. */
  draftToTarget: Int32Array | null;
}

function fail(file: string, msg: string): never {
  throw new ModelLoadError(file, msg);
}

/** Reads and checks an EAGLE-3 head's directory (or a repo id in the local Hugging Face cache). */
export function loadEagle3HeadDir(dirArg: string): Eagle3HeadDir {
  const dir = resolve(resolveModelPath(dirArg));
  const file = join(dir, 'config.json');
  if (!existsSync(file)) fail(file, `not found in ${dir} (an EAGLE-3 head's directory has config.json and model.safetensors)`);
  let json: Record<string, unknown>;
  try {
    json = JSON.parse(readFileSync(file, 'utf8')) as Record<string, unknown>;
  } catch (err) {
    throw new ModelLoadError(file, `cannot read: ${describeError(err)}`, { cause: err });
  }
  if (typeof json !== 'object' || json === null || Array.isArray(json)) fail(file, 'is not a JSON object');
  const archs = json.architectures;
  if (!Array.isArray(archs) || !archs.some((a) => (EAGLE3_ARCHITECTURES as readonly unknown[]).includes(a))) {
    fail(file, `architectures is ${JSON.stringify(archs)}; an EAGLE-3 head's is ${EAGLE3_ARCHITECTURES.join(' or ')}`);
  }
  const eagle = (typeof json.eagle_config === 'object' && json.eagle_config !== null ? json.eagle_config : {}) as Record<string, unknown>;
  if (eagle.use_aux_hidden_state === false) {
    fail(file, 'eagle_config.use_aux_hidden_state is false; Quire runs EAGLE-3 heads that read three target layers (fc)');
  }
  // the head's decoder layer is a Llama layer: its fields read as a Llama config's
  const config = parseModelConfig({ ...json, architectures: ['LlamaForCausalLM'] }, file);
  if (config.numLayers !== 1) fail(file, `num_hidden_layers is ${config.numLayers}; Quire runs EAGLE-3 heads of one layer (every published head's)`);
  if (config.qkvBias) fail(file, 'attention_bias is true; an EAGLE-3 head with attention biases is not supported');
  if (json.target_hidden_size !== undefined && json.target_hidden_size !== null && json.target_hidden_size !== config.hiddenSize) {
    fail(file, `target_hidden_size (${JSON.stringify(json.target_hidden_size)}) differs from hidden_size (${config.hiddenSize}); ` +
      'Quire runs heads of the target\'s hidden size');
  }
  const draftVocabSize = json.draft_vocab_size ?? config.vocabSize;
  if (!Number.isInteger(draftVocabSize) || (draftVocabSize as number) < 1 || (draftVocabSize as number) > config.vocabSize) {
    fail(file, `draft_vocab_size is ${JSON.stringify(draftVocabSize)}; expected a positive integer up to vocab_size (${config.vocabSize})`);
  }
  const ids = json.eagle_aux_hidden_state_layer_ids ?? eagle.eagle_aux_hidden_state_layer_ids ?? null;
  const where = json.eagle_aux_hidden_state_layer_ids !== undefined ? 'eagle_aux_hidden_state_layer_ids' : 'eagle_config.eagle_aux_hidden_state_layer_ids';
  if (ids !== null && !(Array.isArray(ids) && ids.length === 3 && ids.every((i) => Number.isInteger(i) && i >= 0))) {
    fail(file, `${where} is ${JSON.stringify(ids)}; expected three non-negative layer indices`);
  }
  const nbr = json.norm_before_residual ?? false;
  if (typeof nbr !== 'boolean') fail(file, `norm_before_residual is ${JSON.stringify(nbr)}; expected true or false`);
  const weightsFile = join(dir, 'model.safetensors');
  if (!existsSync(weightsFile)) {
    const bin = existsSync(join(dir, 'pytorch_model.bin')) ? ' (it has pytorch_model.bin: Quire reads safetensors; convert it with safetensors.torch.save_file)' : '';
    fail(weightsFile, `not found in ${dir}${bin}`);
  }
  const { weights, indices } = openIndexedSafetensors(weightsFile);
  return { dir, config, draftVocabSize: draftVocabSize as number, auxLayerIds: ids as number[] | null, normBeforeResidual: nbr,
    weights, draftToTarget: draftToTarget(indices.get('d2t'), draftVocabSize as number, config.vocabSize, weightsFile) };
}

/** d2t (I64 or I32 offsets, one a draft id) as target ids, each checked to lie in the target vocabulary. */
function draftToTarget(d2t: { dtype: string; shape: number[]; data: Uint8Array } | undefined, draftVocab: number,
  vocab: number, file: string): Int32Array | null {
  if (d2t === undefined) return null;
  if (d2t.dtype === 'BOOL' || d2t.shape.length !== 1 || d2t.shape[0] !== draftVocab) {
    fail(file, `tensor d2t is ${d2t.dtype} [${d2t.shape.join(', ')}], expected I64 [${draftVocab}] (draft_vocab_size)`);
  }
  const view = new DataView(d2t.data.buffer, d2t.data.byteOffset, d2t.data.byteLength);
  const out = new Int32Array(draftVocab);
  for (let i = 0; i < draftVocab; i++) {
    const offset = d2t.dtype === 'I64' ? Number(view.getBigInt64(i * 8, true)) : view.getInt32(i * 4, true);
    const id = i + offset;
    if (!(id >= 0 && id < vocab)) fail(file, `tensor d2t maps draft id ${i} to ${id}, outside the target vocabulary (${vocab})`);
    out[i] = id;
  }
  return out;
}
