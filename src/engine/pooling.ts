// An embedding from a final hidden state (vLLM's LAST pooler with its normalize and Matryoshka dimensions).

import type { PoolingParams } from './types.js';

/**
 * The first `dimensions` values of `hidden` (all when null), divided by their L2 norm when `normalize`; float32
 * values (as vLLM's tensors), so the float and base64 encodings of an embedding agree.
 */
export function poolEmbedding(hidden: Float32Array, p: PoolingParams): number[] {
  const kept = p.dimensions === null ? hidden : hidden.subarray(0, p.dimensions);
  if (!p.normalize) return Array.from(kept);
  let sum = 0;
  for (const v of kept) sum += v * v;
  // as torch.nn.functional.normalize: the norm is held to at least 1e-12
  const inv = 1 / Math.max(Math.sqrt(sum), 1e-12);
  return Array.from(kept, (v) => Math.fround(v * inv));
}
