// The step tp-model.test.ts runs on the unsplit model and every rank's shard alike: two prompts in one forward.

import { buildForwardBatch } from '../../src/engine/batch-builder.js';
import type { ForwardBatch } from '../../src/backend/batch.js';

export function twoPrompts(): ForwardBatch {
  return buildForwardBatch([
    { tokenIds: [3, 14, 15, 92, 65, 35], startPosition: 0, blockTable: [1], sample: true },
    { tokenIds: [8, 9, 7], startPosition: 0, blockTable: [2], sample: true },
  ], 16);
}
