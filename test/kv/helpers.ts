// Shared by the KV cache tests.

import assert from 'node:assert/strict';
import type { KVCacheManager, KVRequest } from '../../src/kv/kv-cache-manager.js';

/** Admits r with its prefix hit, computes its whole sequence and caches its full blocks. */
export function runPrompt(kv: KVCacheManager, r: KVRequest): number[] {
  const computed = kv.getComputedBlocks(r);
  const ids = kv.allocateSlots(r, r.allTokenIds.length - computed.numCachedTokens, computed);
  assert.ok(ids !== null);
  r.numComputedTokens = r.allTokenIds.length;
  kv.cacheFullBlocks(r);
  return ids;
}
