// The recurrent group's prefix cache (vLLM's Mamba prefix caching): a pool of
// cached-state slots, each holding a sequence's recurrent state as it was at
// the end of one full page, keyed by that page's block hash (chained: the hash
// names the whole prefix). A hit needs the attention pages up to that page too;
// the KVCacheManager takes the longest prefix that has both.
//
// Slots are evicted least recently used, independently of the pages: a state
// whose pages are gone is never hit and ages out; pages whose state is gone are
// still hit by dense groups but cut a hybrid hit back to an earlier state.

import type { BlockHash } from './block-pool.js';

export class CachedStatePool {
  /** Cached state slot of each saved hash; Map order is recency, least recently used first. */
  private readonly slotOf = new Map<BlockHash, number>();
  private readonly free: number[];

  /** Slots [firstSlot, firstSlot + numSlots) of the backend's state store are this pool's. */
  constructor(readonly firstSlot: number, readonly numSlots: number) {
    this.free = Array.from({ length: numSlots }, (_, i) => firstSlot + i);
  }

  get numCached(): number {
    return this.slotOf.size;
  }

  /** The slot holding the state saved at the end of the page hashed `hash`, or -1. Does not touch it. */
  peek(hash: BlockHash): number {
    return this.slotOf.get(hash) ?? -1;
  }

  /** Marks a hit state most recently used, so that the admissions of a step evict it last. */
  touch(hash: BlockHash): void {
    const slot = this.slotOf.get(hash);
    if (slot === undefined) return;
    this.slotOf.delete(hash);
    this.slotOf.set(hash, slot);
  }

  /**
   * A slot to save the state at the end of the page hashed `hash` into, the least recently used one evicted if
   * none is free; null when that state is cached already (touched) or the pool has no slot at all.
   */
  reserve(hash: BlockHash): number | null {
    if (this.slotOf.has(hash)) {
      this.touch(hash);
      return null;
    }
    let slot = this.free.shift();
    if (slot === undefined) {
      const oldest = this.slotOf.keys().next();
      if (oldest.done === true) return null;
      slot = this.slotOf.get(oldest.value)!;
      this.slotOf.delete(oldest.value);
    }
    this.slotOf.set(hash, slot);
    return slot;
  }

  /** Forgets every saved state (resetPrefixCache). */
  reset(): void {
    for (const slot of this.slotOf.values()) this.free.push(slot);
    this.slotOf.clear();
  }
}
