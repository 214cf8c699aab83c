// The step tp-model.test.ts runs on the unsplit model and every rank's shard alike: two prompts in one forward (a
// hybrid model's sequences in recurrent-state slots 0 and 1, allocated by prepare).

import { buildForwardBatch } from '../../src/engine/batch-builder.js';
import type { Backend } from '../../src/backend/backend.js';
import type { ForwardBatch } from '../../src/backend/batch.js';
import type { Model } from '../../src/model/model.js';

export function twoPrompts(hybrid: boolean): ForwardBatch {
  const slot = (s: number) => (hybrid ? { stateSlot: s } : {});
  return buildForwardBatch([
    { tokenIds: [3, 14, 15, 92, 65, 35], startPosition: 0, blockTable: [1], sample: true, ...slot(0) },
    { tokenIds: [8, 9, 7], startPosition: 0, blockTable: [2], sample: true, ...slot(1) },
  ], 16);
}

/** The KV cache twoPrompts writes into, and a hybrid model's two state slots. */
export function prepare(model: Model, backend: Backend): void {
  backend.allocateKvCache(model.kvCacheSpec(8, 16));
  const states = model.recurrentStateLayout(2);
  if (states !== null) backend.allocateRecurrentState(states);
}
