// Pipeline parallelism's arithmetic (vLLM's --pipeline-parallel-size): the decoder layers split into contiguous
// ranges, one a stage, and a stage's view of the model, so the architectures' loaders load a stage as they load a
// whole model, unchanged but for what a stage leaves out:
//
//   stage 0        embed_tokens, layers [0, n0)
//   stage s        layers [n0 + .. + n(s-1), + ns)
//   the last stage its layers, the final norm and lm_head (tied embeddings: embed_tokens, read as the lm_head)
//
// The split is vLLM's get_pp_indices: as even as possible, the layers left over going one each to the stages before
// the last, from the second to last backwards (the first and the last stage hold the embedding and the lm_head), or
// the counts QUIRE_PP_LAYER_PARTITION gives (vLLM's VLLM_PP_LAYER_PARTITION: "8,12,12").
//
// A stage's config (stagedConfig) has its own layers only (numLayers, and the per-layer fields sliced: MoE's sparse
// layers, a hybrid model's layer types), numbered from 0, so each stage's KV cache and recurrent states hold its
// layers alone; its WeightSource (stagedSource) names layer i as the checkpoint's layer first + i and hides the
// other stages' layers, so no stage reads a tensor it does not hold.

import { readKnob } from '../knobs/knobs.js';
import type { ModelConfig, WeightSource } from '../loader/types.js';
import { shardedConfig, shardedSource, type ShardOptions } from './sharded-source.js';

/** A stage's layers of the whole model: [first, first + count). */
export interface StageLayers {
  first: number;
  count: number;
}

/** Layer counts a stage, from QUIRE_PP_LAYER_PARTITION or as even as vLLM makes them; throws naming what is wrong. */
export function layerPartition(numLayers: number, numStages: number,
  custom: string | undefined = readKnob('QUIRE_PP_LAYER_PARTITION')): number[] {
  if (!Number.isInteger(numStages) || numStages < 1) throw new Error(`pipeline-parallel size ${numStages} is not a positive integer`);
  if (custom !== undefined) {
    const counts = custom.split(',').map(Number);
    const sum = counts.reduce((a, b) => a + b, 0);
    if (counts.length !== numStages) {
      throw new Error(`QUIRE_PP_LAYER_PARTITION=${custom} gives ${counts.length} stages, --pipeline-parallel-size is ${numStages}`);
    }
    if (counts.some((n) => !Number.isInteger(n) || n < 1)) {
      throw new Error(`QUIRE_PP_LAYER_PARTITION=${custom}: every stage needs a whole number of layers, at least 1`);
    }
    if (sum !== numLayers) {
      throw new Error(`QUIRE_PP_LAYER_PARTITION=${custom} sums to ${sum} layers; the model has ${numLayers} (num_hidden_layers)`);
    }
    return counts;
  }
  if (numStages > numLayers) {
    throw new Error(`--pipeline-parallel-size ${numStages} is more than the model's ${numLayers} layers ` +
      '(num_hidden_layers): every stage needs at least one');
  }
  const counts = Array.from({ length: numStages }, () => Math.floor(numLayers / numStages));
  for (let i = 2; i < 2 + (numLayers % numStages); i++) counts[numStages - i]!++;
  return counts;
}

/** Each stage's layers, in stage order. */
export function stageLayers(counts: readonly number[]): StageLayers[] {
  let first = 0;
  return counts.map((count) => {
    const s = { first, count };
    first += count;
    return s;
  });
}

/**
 * Where a rank sits among tp x pp: its tensor-parallel rank in its stage (rank mod tp) and its stage. Rank 0 is the
 * engine's thread, which must hold the logits (the sampler, the prompt logprobs, the pooled hidden states, the
 * verification of proposals are all there), so the stages count down from it: ranks 0 .. tp - 1 are the last stage,
 * the next tp the one before it, and the first stage's ranks come last (vLLM's rank = pp_rank x tp + tp_rank, its
 * stage order reversed). With stage s on ranks (pp - 1 - s) x tp .., the residual stream flows from the highest ranks
 * to rank 0, and nothing flows back.
 */
export function rankPlace(rank: number, tp: number, pp: number): { tpRank: number; stage: number } {
  if (!Number.isInteger(rank) || rank < 0 || rank >= tp * pp) throw new Error(`rank ${rank} is not in [0, ${tp * pp})`);
  return { tpRank: rank % tp, stage: pp - 1 - Math.floor(rank / tp) };
}

/** The rank of tensor-parallel rank `tpRank` of stage `stage` (rankPlace's inverse). */
export function rankAt(stage: number, tpRank: number, tp: number, pp: number): number {
  return (pp - 1 - stage) * tp + tpRank;
}

/**
 * What a rank loads: its tensor-parallel shard (sharded-source.ts; its experts whole where `shard` says expert
 * parallel) of its stage's layers.
 */
export function rankView(config: ModelConfig, weights: WeightSource, place: { tpRank: number; stage: number },
  tp: number, pp: number, layers: StageLayers | null, opts: ShardOptions = {}): { config: ModelConfig; weights: WeightSource } {
  const shard = tp > 1 ? { config: shardedConfig(config, place.tpRank, tp, opts),
    weights: shardedSource(weights, config, place.tpRank, tp, opts) } : { config, weights };
  if (pp === 1 || layers === null) return shard;
  return { config: stagedConfig(shard.config, place.stage, pp, layers), weights: stagedSource(shard.weights, layers) };
}

/** Why `config` cannot run over `numStages` stages, or null (the partition's own errors, as layerPartition's). */
export function pipelineRefusal(config: ModelConfig, numStages: number): string | null {
  if (numStages === 1) return null;
  try {
    layerPartition(config.numLayers, numStages);
  } catch (err) {
    return (err as Error).message;
  }
  return null;
}

/** Stage `stage`'s config: its layers, numbered from 0 (ModelConfig.pipelineStage says where they sit). */
export function stagedConfig(c: ModelConfig, stage: number, numStages: number, layers: StageLayers): ModelConfig {
  const slice = <T>(perLayer: readonly T[]): T[] => perLayer.slice(layers.first, layers.first + layers.count);
  return {
    ...c, numLayers: layers.count,
    moe: c.moe && { ...c.moe, sparseLayers: slice(c.moe.sparseLayers) },
    hybrid: c.hybrid && { ...c.hybrid, layerTypes: slice(c.hybrid.layerTypes) },
    pipelineStage: { stage, numStages, firstLayer: layers.first },
  };
}

/** A decoder layer's tensor: its prefix (model., model.language_model.), its index, the rest of its name. */
const LAYER = /^((?:model\.)?(?:language_model\.)?layers\.)(\d+)(\..+)$/;

/**
 * `source` as stage `layers` sees it: layer i is the checkpoint's layer layers.first + i, the other stages' layers
 * are not there; every other tensor (embeddings, norms, lm_head) is as it is.
 */
export function stagedSource(source: WeightSource, layers: StageLayers): WeightSource {
  const global = (name: string): string => {
    const m = LAYER.exec(name);
    if (!m) return name;
    const local = Number(m[2]);
    // a local index past the stage's layers names nothing: the next stage's layer must not be read through it
    return local < layers.count ? `${m[1]}${layers.first + local}${m[3]}` : `${name} (past this pipeline stage's layers)`;
  };
  const local = (name: string): string | null => {
    const m = LAYER.exec(name);
    if (!m) return name;
    const l = Number(m[2]) - layers.first;
    return l >= 0 && l < layers.count ? `${m[1]}${l}${m[3]}` : null;
  };
  return {
    names: () => source.names().map(local).filter((n) => n !== null),
    has: (name) => source.has(global(name)),
    info: (name) => source.info(global(name)),
    read: (name) => ({ ...source.read(global(name)), name }),
    ...(source.readInto ? { readInto: (name: string, offset: number, into: Uint8Array) => source.readInto!(global(name), offset, into) } : {}),
  };
}
