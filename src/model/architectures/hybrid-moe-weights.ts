// The feed-forward of a hybrid family's layer as its checkpoints name it (under the text model's prefix, see
// qwen3_5-weights.ts), and what the loader makes of it:
//   dense layer (Qwen3.5; Qwen3-Next's mlp_only_layers):  mlp.{gate,up}_proj [I, hidden], mlp.down_proj [hidden, I]
//   sparse layer (Qwen3.5-MoE, Qwen3-Next):  mlp.gate [E, hidden] (the router), the routed experts, and the shared
//     expert mlp.shared_expert.{gate,up}_proj [Is, hidden], mlp.shared_expert.down_proj [hidden, Is] with its gate
//     mlp.shared_expert_gate [1, hidden]
// The routed experts come in two layouts: fused, as transformers 5 holds them and the published Qwen3.5-MoE
// checkpoints store them (mlp.experts.gate_up_proj [E, 2I, hidden], each expert's gate rows then its up rows;
// mlp.experts.down_proj [E, hidden, I]), or one module an expert (mlp.experts.{e}.{gate,up,down}_proj.weight, as
// Qwen3-Next's checkpoints store them and transformers fuses at load). Either becomes Backend's MoeExperts stacking
// ([E 2I, hidden] and [E hidden, I]), which the fused tensors' bytes already are. gate and up are fused into one
// weight (gate rows first) for the dense MLP and the shared expert alike. An expert-parallel rank's config
// (MoeConfig.localExperts) names its own experts only: their modules, or its rows of the fused tensors.

import type { Backend, Tensor } from '../../backend/backend.js';
import { heldExperts } from '../../loader/moe-config.js';
import type { ModelConfig, WeightSource } from '../../loader/types.js';
import type { SharedExpert } from '../layers/moe.js';
import { partsUploader } from './weight-parts.js';

/** How a checkpoint stores its routed experts. */
export type ExpertLayout = 'fused' | 'per-expert';

/** A sparse layer's tensors: its router, its routed experts stacked, its shared expert. */
export interface HybridMoeWeights {
  router: Tensor;
  /** [E 2I, hidden] */
  gateUp: Tensor;
  /** [E hidden, I] */
  down: Tensor;
  shared: SharedExpert;
}

/** A layer's feed-forward: a dense MLP's fused gate_up and down, or a sparse layer's experts. */
export type HybridFeedForwardWeights = { gateUp: Tensor; down: Tensor; moe: null } | { gateUp: null; down: null; moe: HybridMoeWeights };

/**
 * The checkpoint's expert layout: fused where its first sparse layer has mlp.experts.gate_up_proj. Without a
 * checkpoint (the names a test model is written with), the family's published one: fused for Qwen3.5-MoE, one module
 * an expert for Qwen3-Next.
 */
export function expertLayout(c: ModelConfig, prefix: string, source: Pick<WeightSource, 'has'> | null): ExpertLayout {
  const first = c.moe?.sparseLayers.indexOf(true) ?? -1;
  if (source === null || first < 0) return c.architecture === 'qwen3_5_moe' ? 'fused' : 'per-expert';
  return source.has(`${prefix}layers.${first}.mlp.experts.gate_up_proj`) ? 'fused' : 'per-expert';
}

/**
 * Adds a layer's feed-forward tensors (`p`: the layer's prefix, e.g. model.layers.3.; `sparse`: its MLP is the experts)
 * to a checkpoint's expected list.
 */
export function addFeedForwardTensors(c: ModelConfig, sparse: boolean, p: string, layout: ExpertLayout,
  add: (name: string, shape: number[]) => void): void {
  const H = c.hiddenSize;
  const moe = c.moe;
  if (!sparse || !moe) {
    add(`${p}mlp.gate_proj.weight`, [c.intermediateSize, H]);
    add(`${p}mlp.up_proj.weight`, [c.intermediateSize, H]);
    add(`${p}mlp.down_proj.weight`, [H, c.intermediateSize]);
    return;
  }
  const { numExperts: E, expertIntermediateSize: I } = moe;
  const Is = sharedWidth(c);
  const held = heldExperts(moe);
  add(`${p}mlp.gate.weight`, [E, H]);
  if (layout === 'fused') {
    add(`${p}mlp.experts.gate_up_proj`, [held.length, 2 * I, H]);
    add(`${p}mlp.experts.down_proj`, [held.length, H, I]);
  } else {
    for (const e of held) {
      add(`${p}mlp.experts.${e}.gate_proj.weight`, [I, H]);
      add(`${p}mlp.experts.${e}.up_proj.weight`, [I, H]);
      add(`${p}mlp.experts.${e}.down_proj.weight`, [H, I]);
    }
  }
  add(`${p}mlp.shared_expert.gate_proj.weight`, [Is, H]);
  add(`${p}mlp.shared_expert.up_proj.weight`, [Is, H]);
  add(`${p}mlp.shared_expert.down_proj.weight`, [H, Is]);
  add(`${p}mlp.shared_expert_gate.weight`, [1, H]);
}

function sharedWidth(c: ModelConfig): number {
  const Is = c.moe?.sharedExpertIntermediateSize;
  if (Is === null || Is === undefined) throw new Error(`${c.architecture}: a sparse hybrid layer needs a shared expert`);
  return Is;
}

/** Loads a layer's feed-forward (`sparse`: the experts; validated already: validateWeights). */
export function loadFeedForward(c: ModelConfig, sparse: boolean, p: string, layout: ExpertLayout, source: WeightSource,
  backend: Backend): HybridFeedForwardWeights {
  const fused = partsUploader(source, backend);
  const up = (n: string): Tensor => fused(n, [n]);
  const gateUp = (m: string): Tensor =>
    fused(`${m}gate_up_proj.weight`, [`${m}gate_proj.weight`, `${m}up_proj.weight`]);
  const moe = c.moe;
  if (!sparse || !moe) return { gateUp: gateUp(`${p}mlp.`), down: up(`${p}mlp.down_proj.weight`), moe: null };
  const x = `${p}mlp.experts.`;
  const experts = heldExperts(moe).map((e) => `${x}${e}.`);
  return {
    gateUp: null, down: null,
    moe: {
      router: up(`${p}mlp.gate.weight`),
      // fused: [E, 2I, hidden] and [E, hidden, I] as E 2I and E hidden rows (weight-parts.ts)
      gateUp: fused(`${x}gate_up_proj`, layout === 'fused' ? [`${x}gate_up_proj`]
        : experts.flatMap((m) => [`${m}gate_proj.weight`, `${m}up_proj.weight`])),
      down: fused(`${x}down_proj`, layout === 'fused' ? [`${x}down_proj`] : experts.map((m) => `${m}down_proj.weight`)),
      shared: { gateUp: gateUp(`${p}mlp.shared_expert.`), down: up(`${p}mlp.shared_expert.down_proj.weight`),
        gate: up(`${p}mlp.shared_expert_gate.weight`) },
    },
  };
}
