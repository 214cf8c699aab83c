// The model's layers' declared state (Model.layerStateSpecs) as the KV cache groups kv/ allocates per: layers of
// equal specs share a group. A dense model is one full-attention group. Under pipeline parallelism the engine's groups
// are the whole model's, from every stage's specs in stage order (tp/stage-kv.ts), and each stage's own are its
// layers' alone (its pages and state slots hold only them).

import { groupLayerSpecs, type KVCacheGroup } from '../kv/kv-cache-spec.js';
import type { Model } from '../model/model.js';
import { recurrentStateBytes, type LayerStateSpec } from '../model/layers/types.js';

export function kvCacheGroupsOf(model: Model): KVCacheGroup[] {
  return kvCacheGroupsOfSpecs(model.layerStateSpecs(), model.backend.ssmBytesPerElement);
}

/** `ssmBytesPerElement`: the backends' (Backend.ssmBytesPerElement; every stage's is the same). */
export function kvCacheGroupsOfSpecs(specs: readonly (LayerStateSpec | null)[],
  ssmBytesPerElement: number): KVCacheGroup[] {
  if (specs.some((s) => s === null)) throw new Error('kvCacheGroupsOf: a layer that keeps no state has no KV cache group yet');
  return groupLayerSpecs(specs.map((s) => s!.kind === 'recurrent'
    ? { kind: 'recurrent', stateBytes: recurrentStateBytes(s!.shape, ssmBytesPerElement) }
    : { kind: 'full_attention', numKvHeads: s!.numKvHeads, headDim: s!.headDim }));
}
