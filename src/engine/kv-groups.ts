// The model's layers' declared state (Model.layerStateSpecs) as the KV cache groups kv/ allocates per: layers of
// equal specs share a group. A dense model is one full-attention group.

import { groupLayerSpecs, type KVCacheGroup } from '../kv/kv-cache-spec.js';
import type { Model } from '../model/model.js';
import { recurrentStateBytes } from '../model/layers/types.js';

export function kvCacheGroupsOf(model: Model): KVCacheGroup[] {
  const specs = model.layerStateSpecs();
  if (specs.some((s) => s === null)) throw new Error('kvCacheGroupsOf: a layer that keeps no state has no KV cache group yet');
  return groupLayerSpecs(specs.map((s) => s!.kind === 'recurrent'
    ? { kind: 'recurrent', stateBytes: recurrentStateBytes(s!.shape) }
    : { kind: 'full_attention', numKvHeads: s!.numKvHeads, headDim: s!.headDim }));
}
