// The pages of one KV cache group (vLLM's SingleTypeKVCacheManager): which
// pages each request holds in this group, how many more it needs, and the
// group's prefix cache. Full-attention groups draw from the one BlockPool the
// KVCacheManager owns; a recurrent group hands out slots of its own (a state is
// far larger than a page of tokens: sharing the pool would pad every page to
// it). The KVCacheManager checks a request's need over all groups before any
// group takes a page or a slot, so a manager here never decides alone.

import type { BlockPool, KVBlock } from './block-pool.js';
import type { BlockHasher, KVRequest } from './block-hash.js';
import type { KVCacheSpec } from './kv-cache-spec.js';
import { CachedStatePool } from './state-cache.js';

export interface SingleTypeKVCacheManager {
  readonly kind: KVCacheSpec['kind'];
  readonly groupId: number;
  /** Leading blocks of the request found in this group's prefix cache, at most maxBlocks. */
  findLongestCacheHit(req: KVRequest, maxBlocks: number): KVBlock[];
  /** Pages to take from the free queue so the request holds `numTokens` tokens (after `numHitBlocks` hit pages). */
  numNewBlocksFor(requestId: string, numTokens: number, numHitBlocks: number): number;
  /** Whether what the group keeps outside the pool (a recurrent group's slots) can serve the request. */
  hasRoomFor(requestId: string, numTokens: number): boolean;
  /** Appends hit pages (already touched) and new pages to the request's table; takes what hasRoomFor promised. */
  addBlocks(requestId: string, hit: readonly KVBlock[], fresh: readonly KVBlock[], numTokens: number): void;
  /** Registers the request's full pages among its first numTokens tokens. */
  cacheFullBlocks(req: KVRequest, numTokens: number): void;
  /**
   * Forgets the request; returns its pool pages in sequence order (pages past its computed tokens lose their hash).
   * What it held outside the pool goes back at once.
   */
  popBlocksForFree(req: KVRequest): KVBlock[];
  /** Drops the request's pool pages past its first numTokens tokens from its table; returns them in sequence order. */
  removeTail(requestId: string, numTokens: number): KVBlock[];
  blockTable(requestId: string): readonly number[];
  requestIds(): Iterable<string>;
  /** Pool pages a request of numTokens tokens holds at most in this group. */
  maxNumBlocksFor(numTokens: number): number;
}

/** Full attention: one page per blockSize tokens, full pages shared through the prefix cache. */
export class FullAttentionManager implements SingleTypeKVCacheManager {
  readonly kind = 'full_attention';
  /** Its full pages are registered in the prefix cache and can be hit. */
  private readonly cacheable: boolean;
  private readonly blocksOf = new Map<string, KVBlock[]>();
  private readonly blockIdsOf = new Map<string, number[]>();
  /** Leading blocks of each request already registered in the prefix cache. */
  private readonly numCachedBlocksOf = new Map<string, number>();

  constructor(readonly groupId: number, private readonly pool: BlockPool, private readonly hasher: BlockHasher,
    enablePrefixCaching: boolean) {
    this.cacheable = enablePrefixCaching;
  }

  private get blockSize(): number {
    return this.hasher.blockSize;
  }

  findLongestCacheHit(req: KVRequest, maxBlocks: number): KVBlock[] {
    if (!this.cacheable) return [];
    this.hasher.ensureBlockHashes(req, maxBlocks);
    const hit: KVBlock[] = [];
    for (let i = 0; i < maxBlocks; i++) {
      const hash = req.blockHashes[i]!;
      const block = this.pool.getCachedBlock(hash, this.groupId);
      if (block === null || !this.hasher.matches(block, req, i, i === 0 ? null : req.blockHashes[i - 1]!)) break;
      hit.push(block);
    }
    return hit;
  }

  numNewBlocksFor(requestId: string, numTokens: number, numHitBlocks: number): number {
    const numHeld = this.blocksOf.get(requestId)?.length ?? 0;
    return Math.max(0, Math.ceil(numTokens / this.blockSize) - numHeld - numHitBlocks);
  }

  hasRoomFor(): boolean {
    return true;
  }

  addBlocks(requestId: string, hit: readonly KVBlock[], fresh: readonly KVBlock[]): void {
    const blocks = this.blocksOf.get(requestId) ?? [];
    const ids = this.blockIdsOf.get(requestId) ?? [];
    for (const b of hit) { blocks.push(b); ids.push(b.blockId); }
    for (const b of fresh) { blocks.push(b); ids.push(b.blockId); }
    this.blocksOf.set(requestId, blocks);
    this.blockIdsOf.set(requestId, ids);
    if (!this.numCachedBlocksOf.has(requestId)) this.numCachedBlocksOf.set(requestId, hit.length);
  }

  cacheFullBlocks(req: KVRequest, numTokens: number): void {
    if (!this.cacheable) return;
    const blocks = this.blocksOf.get(req.requestId);
    if (blocks === undefined) return;
    const numKnown = req.allTokenIds.length - (req.numPlaceholders ?? 0);
    const numFull = Math.min(Math.floor(Math.min(numTokens, numKnown) / this.blockSize), blocks.length);
    const start = this.numCachedBlocksOf.get(req.requestId) ?? 0;
    if (numFull <= start) return;
    this.hasher.ensureBlockHashes(req, numFull);
    for (let i = start; i < numFull; i++) {
      // false: another page already holds this hash; this one stays private.
      this.pool.cacheBlock(blocks[i]!, {
        blockHash: req.blockHashes[i]!,
        parentHash: i === 0 ? null : req.blockHashes[i - 1]!,
        extraKey: this.hasher.extraKey(req, i),
        tokenIds: req.allTokenIds.slice(i * this.blockSize, (i + 1) * this.blockSize),
      }, this.groupId);
    }
    this.numCachedBlocksOf.set(req.requestId, numFull);
  }

  removeTail(requestId: string, numTokens: number): KVBlock[] {
    const blocks = this.blocksOf.get(requestId);
    if (blocks === undefined) return [];
    const keep = Math.ceil(numTokens / this.blockSize);
    if (blocks.length <= keep) return [];
    const tail = blocks.splice(keep);
    this.blockIdsOf.get(requestId)!.length = keep;
    for (const b of tail) if (b.blockHash !== null) throw new Error(`page ${b.blockId} rolled back while registered in the prefix cache`);
    return tail;
  }

  popBlocksForFree(req: KVRequest): KVBlock[] {
    const id = req.requestId;
    const blocks = this.blocksOf.get(id) ?? [];
    for (let i = Math.floor(req.numComputedTokens / this.blockSize); i < blocks.length; i++) {
      this.pool.uncacheBlock(blocks[i]!);
    }
    this.blocksOf.delete(id);
    this.blockIdsOf.delete(id);
    this.numCachedBlocksOf.delete(id);
    return blocks;
  }

  blockTable(requestId: string): readonly number[] {
    return this.blockIdsOf.get(requestId) ?? [];
  }

  requestIds(): Iterable<string> {
    return this.blocksOf.keys();
  }

  maxNumBlocksFor(numTokens: number): number {
    return Math.ceil(numTokens / this.blockSize);
  }
}

/**
 * A fixed-size state per sequence: one slot of the group's own `numSlots` (not a pool page) from admission to
 * finish, written in place every step (so never shared). Its table is [slot]. A preempted request loses it and
 * recomputes its state from its first token (a chunk at position 0 starts from zeros) or from a cached state, so
 * preemption needs no spare slot: the engine sizes one per sequence it may run. With prefix caching, copies of
 * states at page ends live in `cache`: slots numSlots .. numSlots + numCachedSlots - 1 of the same store.
 */
export class RecurrentStateManager implements SingleTypeKVCacheManager {
  readonly kind = 'recurrent';
  private readonly tableOf = new Map<string, readonly number[]>();
  /** Free slots, the longest free first (a freed slot goes to the back). */
  private readonly free: number[];
  /** Saved states for prefix-cache hits; null: prefix caching off or no slot for it. */
  readonly cache: CachedStatePool | null;

  constructor(readonly groupId: number, readonly numSlots: number, numCachedSlots = 0) {
    if (!Number.isInteger(numSlots) || numSlots < 1) throw new Error(`a recurrent KV cache group needs state slots, got ${numSlots}`);
    this.free = Array.from({ length: numSlots }, (_, i) => i);
    this.cache = numCachedSlots > 0 ? new CachedStatePool(numSlots, numCachedSlots) : null;
  }

  get numFreeSlots(): number {
    return this.free.length;
  }

  findLongestCacheHit(): KVBlock[] {
    return [];
  }

  numNewBlocksFor(): number {
    return 0;
  }

  hasRoomFor(requestId: string, numTokens: number): boolean {
    return numTokens <= 0 || this.tableOf.has(requestId) || this.free.length > 0;
  }

  addBlocks(requestId: string, hit: readonly KVBlock[], fresh: readonly KVBlock[], numTokens: number): void {
    if (hit.length > 0 || fresh.length > 0) throw new Error(`request ${requestId}: a recurrent state takes no pool page`);
    if (numTokens <= 0 || this.tableOf.has(requestId)) return;
    const slot = this.free.shift();
    if (slot === undefined) throw new Error(`request ${requestId}: no free state slot`);
    this.tableOf.set(requestId, [slot]);
  }

  cacheFullBlocks(): void {}

  removeTail(): KVBlock[] {
    return [];
  }

  popBlocksForFree(req: KVRequest): KVBlock[] {
    const table = this.tableOf.get(req.requestId);
    if (table !== undefined) {
      this.free.push(table[0]!);
      this.tableOf.delete(req.requestId);
    }
    return [];
  }

  blockTable(requestId: string): readonly number[] {
    return this.tableOf.get(requestId) ?? [];
  }

  requestIds(): Iterable<string> {
    return this.tableOf.keys();
  }

  maxNumBlocksFor(): number {
    return 0;
  }
}

export function managerForSpec(spec: KVCacheSpec, groupId: number, pool: BlockPool, hasher: BlockHasher,
  enablePrefixCaching: boolean, numStateSlots: number, numCachedStateSlots: number): SingleTypeKVCacheManager {
  switch (spec.kind) {
    case 'full_attention': return new FullAttentionManager(groupId, pool, hasher, enablePrefixCaching);
    case 'recurrent': return new RecurrentStateManager(groupId, numStateSlots, enablePrefixCaching ? numCachedStateSlots : 0);
  }
}
