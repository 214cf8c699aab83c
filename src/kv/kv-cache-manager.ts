// Pages per request over all KV cache groups of a model, and the prefix cache
// (vLLM's KVCacheManager and KVCacheCoordinator in one): one single-type
// manager per group. Full-attention groups draw from ONE BlockPool, so page
// ids are global; a recurrent group (a hybrid model's linear-attention state)
// hands out slots of its own, numStateSlots of them. A dense model is one
// full-attention group.
//
//   request r, groups A (full attention) and B (recurrent state):
//     A: [p3][p7][p9]      one pool page per blockSize tokens
//     B: [s2]              one state slot, whatever the length
//
// Check, then act, across groups: allocateSlots counts what every group needs
// before any group takes a page or a slot, so a shortage changes nothing anywhere.
//
// A full block is registered when its slots are allocated, before the step
// that computes it (as vLLM): a request admitted later in the same step may hit
// it, reading KV that an earlier row of the same forward pass writes (every
// backend writes a layer's slots before that layer's attention). A request
// freed before its blocks were computed (preempted in the step that allocated
// them) unregisters them, so no hit ever reads a page that was never written.
//
// A recurrent group's prefix cache holds states, not pages (vLLM's Mamba prefix
// caching): a state saved when a step ended exactly at a page end of a prompt
// (saveStateSlot), keyed by that page's hash. A hit on a hybrid model is the
// longest run of attention pages whose last page has a saved state; the
// request's own slot starts as a copy of it (ComputedBlocks.stateSlot). States
// are registered when the step that computes them is built, after its
// admissions, so no hit reads a state before the step that saves it has run.

import { BlockPool, type KVBlock } from './block-pool.js';
import { BlockHasher, type ExtraHashKeys, type KVRequest } from './block-hash.js';
import type { KVCacheGroup } from './kv-cache-spec.js';
import { FullAttentionManager, managerForSpec, RecurrentStateManager, type SingleTypeKVCacheManager }
  from './single-type-kv-cache-manager.js';

export { hashBlockTokens, type KVRequest } from './block-hash.js';
export { bytesPerKvBlock, numBlocksForBytes } from './kv-cache-spec.js';

export interface KVCacheManagerOptions {
  numBlocks: number;
  blockSize: number;
  enablePrefixCaching: boolean;
  /** Extra key hashed into block `blockIndex` (e.g. a LoRA adapter id); null for none. */
  extraHashKeys?: ExtraHashKeys;
  /** The model's KV cache groups (groupLayerSpecs); absent: one full-attention group, a dense model. */
  groups?: readonly KVCacheGroup[];
  /** State slots of the recurrent group (a sequence each); required when there is one. */
  numStateSlots?: number;
  /** Slots for states saved at page ends (after numStateSlots in the backend's store); 0: a hybrid never hits. */
  numCachedStateSlots?: number;
  /**
   * Speculative decoding on a hybrid model: a backup slot per state slot (after the cached ones), where a verify
   * step's state is copied before it runs, so that a rejected proposal can be undone (specBackupSlot).
   */
  specBackupSlots?: boolean;
}

/** A prefix-cache hit: leading full blocks whose KV can be reused. */
export interface ComputedBlocks {
  /** Group 0's hit pages (all of them for a one-group cache). */
  blockIds: readonly number[];
  numCachedTokens: number;
  /** Every group's hit pages, in group order; absent when the cache has one group. */
  groupBlockIds?: readonly (readonly number[])[];
  /** A hybrid hit: the cached-state slot holding the recurrent state at numCachedTokens (copied into the request's). */
  stateSlot?: number;
  /**
   * With a recurrent group: the tokens of the request's leading pages found cached, where more than numCachedTokens
   * (no saved state there). The request saves its state at that page end (Scheduler: its prompt chunk ends there),
   * so a later prompt sharing that prefix hits all of it.
   */
  numMatchedTokens?: number;
}

export const NO_COMPUTED_BLOCKS: ComputedBlocks = Object.freeze({ blockIds: [], numCachedTokens: 0 });

export class KVCacheManager {
  readonly pool: BlockPool;
  readonly blockSize: number;
  readonly enablePrefixCaching: boolean;
  private readonly managers: readonly SingleTypeKVCacheManager[];
  /** Whether state slots have backups (KVCacheManagerOptions.specBackupSlots, on a model with a recurrent group). */
  readonly specBackupSlots: boolean;
  private readonly recurrent: RecurrentStateManager | null;
  private readonly hasher: BlockHasher;
  /** Prompt tokens looked up in the prefix cache (vLLM's queries, in tokens). */
  prefixCacheQueries = 0;
  /** Tokens found in the prefix cache. */
  prefixCacheHits = 0;

  constructor(o: KVCacheManagerOptions) {
    if (!Number.isInteger(o.blockSize) || o.blockSize < 1) throw new Error(`bad blockSize ${o.blockSize}`);
    if (o.groups !== undefined && o.groups.length === 0) throw new Error('no KV cache groups');
    this.pool = new BlockPool(o.numBlocks);
    this.blockSize = o.blockSize;
    this.enablePrefixCaching = o.enablePrefixCaching;
    const hasher = new BlockHasher(o.blockSize, o.extraHashKeys);
    this.hasher = hasher;
    // the backends keep one state layout, addressed by one slot a sequence
    if ((o.groups ?? []).filter((g) => g.spec.kind === 'recurrent').length > 1) throw new Error('more than one recurrent KV cache group');
    this.managers = o.groups === undefined
      ? [new FullAttentionManager(0, this.pool, hasher, o.enablePrefixCaching)]
      : o.groups.map((g, i) => managerForSpec(g.spec, i, this.pool, hasher, o.enablePrefixCaching, o.numStateSlots ?? 0,
        o.numCachedStateSlots ?? 0));
    this.recurrent = this.managers.find((m): m is RecurrentStateManager => m instanceof RecurrentStateManager) ?? null;
    this.specBackupSlots = o.specBackupSlots === true && this.recurrent !== null;
  }

  /** The first full-attention group: the one whose pages the model's attention layers read (Model: one KV shape). */
  get pagedGroup(): number {
    return this.managers.findIndex((m) => m.kind !== 'recurrent');
  }

  /** Whether the cache has a recurrent group (a hybrid model): its requests hold a state slot each. */
  get hasStateSlots(): boolean {
    return this.recurrent !== null;
  }

  /** Whether recurrent states are saved at page ends and hit (a hybrid model with prefix caching and cached-state slots). */
  get cachesStates(): boolean {
    return this.recurrent?.cache != null;
  }

  /** The recurrent group's cached-state slots (0: none). */
  get numCachedStateSlots(): number {
    return this.recurrent?.cache?.numSlots ?? 0;
  }

  /** States saved for prefix-cache hits now. */
  get numCachedStates(): number {
    return this.recurrent?.cache?.numCached ?? 0;
  }

  /** The recurrent group's slots for running sequences (0 without one). */
  get numStateSlots(): number {
    return this.recurrent?.numSlots ?? 0;
  }

  get numFreeStateSlots(): number {
    return this.recurrent?.numFreeSlots ?? 0;
  }

  /** The request's state slot, or -1 (none held, or no recurrent group). */
  stateSlot(requestId: string): number {
    return this.recurrent?.blockTable(requestId)[0] ?? -1;
  }

  /**
   * Where the request's state is backed up before a verify step (speculative decoding on a hybrid model: the state
   * a rejected proposal leaves behind is replaced by it, and the accepted tokens recomputed), or -1: no backups.
   * Slot s's backup is slot s + numStateSlots + numCachedStateSlots of the backend's store.
   */
  specBackupSlot(requestId: string): number {
    const slot = this.stateSlot(requestId);
    return this.specBackupSlots && slot >= 0 ? slot + this.numStateSlots + this.numCachedStateSlots : -1;
  }

  get numGroups(): number {
    return this.managers.length;
  }

  get numFreeBlocks(): number {
    return this.pool.numFreeBlocks;
  }

  get numBlocks(): number {
    return this.pool.numBlocks;
  }

  usage(): number {
    return this.pool.usage();
  }

  /** The cache's counters as EngineStats reports them. */
  cacheStats(): { kvCacheUsage: number; numFreeBlocks: number; numFreeStateSlots: number; numTotalStateSlots: number;
    numCachedStates: number; numCachedStateSlots: number; prefixCacheQueries: number; prefixCacheHits: number } {
    return { kvCacheUsage: this.usage(), numFreeBlocks: this.numFreeBlocks, numFreeStateSlots: this.numFreeStateSlots,
      numTotalStateSlots: this.numStateSlots, numCachedStates: this.numCachedStates,
      numCachedStateSlots: this.numCachedStateSlots, prefixCacheQueries: this.prefixCacheQueries,
      prefixCacheHits: this.prefixCacheHits };
  }

  /**
   * The longest run of leading full blocks that EVERY group finds in its prefix cache (full attention is
   * prefix-closed: a shorter hit of one group cuts the others to it). Never the whole sequence: its last token
   * is always recomputed so that it yields logits. With a recurrent group the run is cut back to the longest one
   * whose last page has a saved state (none: no hit), and that state's slot is returned.
   */
  getComputedBlocks(req: KVRequest): ComputedBlocks {
    if (!this.enablePrefixCaching) return NO_COMPUTED_BLOCKS;
    const numTokens = req.allTokenIds.length;
    let numHitBlocks = Math.floor(Math.max(0, numTokens - 1) / this.blockSize);
    const hits: KVBlock[][] = [];
    for (const m of this.managers) {
      const hit = m.findLongestCacheHit(req, numHitBlocks);
      if (m.kind !== 'recurrent') numHitBlocks = Math.min(numHitBlocks, hit.length);
      hits.push(hit);
    }
    let stateSlot = -1;
    const cache = this.recurrent?.cache;
    const numMatchedBlocks = numHitBlocks;
    if (this.recurrent !== null) {
      // no state cache: a hit would skip the state of the prompt it covers
      while (numHitBlocks > 0 && (stateSlot = cache?.peek(req.blockHashes[numHitBlocks - 1]!) ?? -1) < 0) numHitBlocks--;
      if (stateSlot >= 0) cache!.touch(req.blockHashes[numHitBlocks - 1]!);
    }
    const groupBlockIds = hits.map((hit) => hit.slice(0, numHitBlocks).map((b) => b.blockId));
    const numCachedTokens = numHitBlocks * this.blockSize;
    this.prefixCacheQueries += numTokens;
    this.prefixCacheHits += numCachedTokens;
    const blockIds = groupBlockIds[0]!;
    if (this.managers.length === 1) return { blockIds, numCachedTokens };
    const matched = cache != null && numMatchedBlocks > numHitBlocks
      ? { numMatchedTokens: numMatchedBlocks * this.blockSize } : {};
    return { blockIds, numCachedTokens, groupBlockIds, ...(stateSlot >= 0 ? { stateSlot } : {}), ...matched };
  }

  /**
   * Where to save the request's recurrent state once the step computing its first `numTokens` tokens has run: a
   * cached-state slot keyed by the hash of the page ending at numTokens, or null (no state cache, not a page end,
   * or that state is saved already). The state counts as cached from now on: call it after the step's admissions.
   */
  saveStateSlot(req: KVRequest, numTokens: number): number | null {
    const cache = this.recurrent?.cache;
    if (cache == null || numTokens <= 0 || numTokens % this.blockSize !== 0) return null;
    const numBlocks = numTokens / this.blockSize;
    if (numBlocks > Math.floor((req.allTokenIds.length - (req.numPlaceholders ?? 0)) / this.blockSize)) return null;
    this.hasher.ensureBlockHashes(req, numBlocks);
    return cache.reserve(req.blockHashes[numBlocks - 1]!);
  }

  /**
   * Pages for `numNewTokens` more tokens (after the computed ones and the hit in `computed`), in every group.
   * Returns the ids of the pages newly taken from the free queue (group by group), or null when memory is
   * short, in which case nothing has changed in any group.
   */
  allocateSlots(req: KVRequest, numNewTokens: number, computed: ComputedBlocks = NO_COMPUTED_BLOCKS):
    number[] | null {
    const id = req.requestId;
    const hits = this.managers.map((m, g) => {
      const ids = this.hitOf(computed, g);
      if (ids.length > 0 && m.blockTable(id).length > 0) {
        throw new Error(`request ${id}: a prefix hit can only start a request with no pages`);
      }
      if (ids.length > 0 && m.kind === 'recurrent') throw new Error(`request ${id}: group ${g} caches states, not pages`);
      return ids.map((b) => this.pool.block(b));
    });
    const numTokensAfter = req.numComputedTokens + computed.numCachedTokens + numNewTokens;
    const numNew = this.managers.map((m, g) => m.numNewBlocksFor(id, numTokensAfter, hits[g]!.length));
    let numNeeded = 0;
    for (let g = 0; g < this.managers.length; g++) {
      numNeeded += numNew[g]!;
      for (const b of hits[g]!) if (b.refCount === 0) numNeeded++;  // a free cached hit leaves the free queue
    }
    if (numNeeded > this.pool.numFreeBlocks) return null;
    if (!this.managers.every((m) => m.hasRoomFor(id, numTokensAfter))) return null;

    // Every group's hit is touched before any group takes new pages: taking pages evicts from the free
    // queue, which may hold another group's hit.
    for (const hit of hits) this.pool.touch(hit);
    const newIds: number[] = [];
    this.managers.forEach((m, g) => {
      const fresh = this.pool.getNewBlocks(numNew[g]!);
      m.addBlocks(id, hits[g]!, fresh, numTokensAfter);
      for (const b of fresh) newIds.push(b.blockId);
    });
    this.cacheFullBlocks(req, numTokensAfter);
    return newIds;
  }

  /** Registers the request's full blocks among its first `numTokens` tokens (computed or being computed). */
  cacheFullBlocks(req: KVRequest, numTokens = req.numComputedTokens): void {
    if (!this.enablePrefixCaching) return;
    for (const m of this.managers) m.cacheFullBlocks(req, numTokens);
  }

  /**
   * Gives back the request's pages past its first `numTokens` tokens (by default its computed ones: rejected
   * speculative tokens were rolled back), last page first. Such pages were never registered in the prefix cache: a
   * page is registered only once every one of its tokens is known (accepted), and proposals are not. (A hybrid model
   * rolls its computed tokens back further, to where its state was backed up, but keeps the pages of the tokens it
   * accepted: they hold their K and V.) Recurrent groups keep their slot.
   */
  removeTail(req: KVRequest, numTokens = req.numComputedTokens): void {
    const freed: KVBlock[] = [];
    for (const m of this.managers) freed.push(...m.removeTail(req.requestId, numTokens).reverse());
    this.pool.freeBlocks(freed);
  }

  /**
   * Releases every page and state slot of the request in every group. Eviction order: the attention groups'
   * pages last page first, position by position across groups, so that shared prefix pages are evicted last and
   * the groups' cached prefixes shrink together (a hit needs them all). Pages past its computed tokens lose their
   * hash.
   */
  free(req: KVRequest): void {
    const order: KVBlock[] = [];
    const attention: KVBlock[][] = [];
    for (const m of this.managers) attention.push(m.popBlocksForFree(req));
    const maxLen = Math.max(0, ...attention.map((b) => b.length));
    for (let i = maxLen - 1; i >= 0; i--) {
      for (const blocks of attention) if (i < blocks.length) order.push(blocks[i]!);
    }
    this.pool.freeBlocks(order);
  }

  /** The first full-attention group's page ids of the request (pagedGroup), in sequence order (empty: none held). */
  blockTable(requestId: string): readonly number[] {
    return this.managers[this.pagedGroup]!.blockTable(requestId);
  }

  /** The request's page ids in every group, in group order (a recurrent group's: [its state slot]). */
  blockTables(requestId: string): readonly (readonly number[])[] {
    return this.managers.map((m) => m.blockTable(requestId));
  }

  /** Pool pages a request of numTokens tokens holds at most, per group (their sum must fit the pool; 0: a recurrent group's). */
  maxNumBlocksPerGroup(numTokens: number): number[] {
    return this.managers.map((m) => m.maxNumBlocksFor(numTokens));
  }

  /** Request ids that hold pages. */
  requestIds(): string[] {
    const ids = new Set<string>();
    for (const m of this.managers) for (const id of m.requestIds()) ids.add(id);
    return [...ids];
  }

  resetPrefixCache(): boolean {
    if (!this.pool.resetPrefixCache()) return false;
    this.recurrent?.cache?.reset();
    return true;
  }

  private hitOf(computed: ComputedBlocks, g: number): readonly number[] {
    if (this.managers.length === 1) return computed.blockIds;
    const ids = computed.groupBlockIds?.[g];
    if (ids !== undefined) return ids;
    if (computed.blockIds.length > 0) throw new Error('a prefix hit of a multi-group cache without groupBlockIds');
    return [];
  }
}
