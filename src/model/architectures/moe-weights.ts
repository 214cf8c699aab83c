// A mixture-of-experts layer's checkpoint names -> its router and its experts stacked (Backend's MoeExperts layout:
// expert e's gate rows then up rows in one [E * 2I, hidden] weight, its down rows in one [E * hidden, I]). Qwen3-MoE
// names them mlp.gate and mlp.experts.{e}.{gate,up,down}_proj; Mixtral block_sparse_moe.gate and
// block_sparse_moe.experts.{e}.{w1,w3,w2} (w1 the gate, w3 the up, w2 the down projection). The router stays in the
// checkpoint's float dtype (block-FP8 checkpoints keep it so); the experts of a layer share one precision.

import type { Tensor } from '../../backend/backend.js';
import { fp8Module } from '../../loader/config.js';
import { heldExperts } from '../../loader/moe-config.js';
import { ModelLoadError } from '../../loader/errors.js';
import type { ModelConfig } from '../../loader/types.js';

export interface LayerExperts {
  /** [E, hidden] */
  router: Tensor;
  /** [E * 2I, hidden] */
  gateUp: Tensor;
  /** [E * hidden, I] */
  down: Tensor;
}

function moeOf(c: ModelConfig) {
  if (!c.moe) throw new Error('moe-weights: not a mixture-of-experts config');
  return c.moe;
}

const parent = (c: ModelConfig, l: number): string =>
  `model.layers.${l}.${c.architecture === 'mixtral' ? 'block_sparse_moe' : 'mlp'}`;

/** The router's module name of layer l. */
export function routerModule(c: ModelConfig, l: number): string {
  return `${parent(c, l)}.gate`;
}

/**
 * Layer l's expert projection modules in stacking order: gateUp [gate_0, up_0, gate_1, ...], down [down_0, ...]; an
 * expert-parallel rank's (MoeConfig.localExperts) its own experts only, in local slot order.
 */
export function expertModules(c: ModelConfig, l: number): { gateUp: string[]; down: string[] } {
  const [gate, up, down] = c.architecture === 'mixtral' ? ['w1', 'w3', 'w2'] : ['gate_proj', 'up_proj', 'down_proj'];
  const experts = heldExperts(moeOf(c)).map((e) => `${parent(c, l)}.experts.${e}`);
  return { gateUp: experts.flatMap((m) => [`${m}.${gate}`, `${m}.${up}`]), down: experts.map((m) => `${m}.${down}`) };
}

/**
 * The first checkpoint tensor naming an expert past config.json's count (num_experts / num_local_experts), or null:
 * a checkpoint of more experts than its config says is refused rather than served with some dropped.
 */
export function extraExpertTensor(c: ModelConfig, names: readonly string[]): string | null {
  const E = moeOf(c).numExperts;
  // under model.language_model. in a multimodal checkpoint (Qwen3.5-MoE); its MTP head's own experts (mtp.*) unread
  const re = /^model\.(?:language_model\.)?layers\.\d+\.(?:mlp|block_sparse_moe)\.experts\.(\d+)\./;
  return names.find((n) => Number(re.exec(n)?.[1] ?? -1) >= E) ?? null;
}

/** Adds layer l's router and expert tensors (through `linear`, which knows block FP8) to a checkpoint's expected list. */
export function addExpertTensors(c: ModelConfig, l: number, add: (name: string, shape: number[]) => void,
  linear: (module: string, shape: [number, number]) => void): void {
  const { numExperts, expertIntermediateSize: I } = moeOf(c);
  const H = c.hiddenSize;
  add(`${routerModule(c, l)}.weight`, [numExperts, H]);
  const { gateUp, down } = expertModules(c, l);
  const mixed = [...gateUp, ...down].find((m) => fp8Module(c, m) !== fp8Module(c, gateUp[0]!));
  if (mixed !== undefined) {
    throw new ModelLoadError('config.json', `field "quantization_config.modules_to_not_convert" (or ignored_layers) names ` +
      `some but not all of layer ${l}'s experts (${mixed}); Quire stacks a layer's experts into one weight, so they ` +
      'must all be FP8 or all not');
  }
  for (const m of gateUp) linear(m, [I, H]);
  for (const m of down) linear(m, [H, I]);
}
