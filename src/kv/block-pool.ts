// The page pool: KV pages as numbered blocks with reference counts, a free
// queue in eviction order, and the prefix cache's hash -> block map.
//
//   free queue:  head (evicted first) <-> b7 <-> b3 <-> b9 <-> tail (freed last)
//
// Invariants:
// - a block is in the free queue iff its refCount is 0 (block 0 is never in it);
// - a block with a hash is in `cachedBlocks[cacheGroupId]` under that hash, and
//   its KV is final (a full block, never written again while the hash is held);
// - the prefix cache is keyed by (KV cache group, hash), as vLLM's
//   BlockHashWithGroupId: groups share one pool and one chain of token hashes,
//   but a page holds the KV of one group's layers only;
// - taking a cached block from the free queue for new use drops its hash.
// Block 0 is reserved as the null block: never handed out, so padding rows and
// the unused entries of a block table (0) point at a page nobody writes.

export type BlockHash = string & { readonly __brand: 'BlockHash' };

export const NULL_BLOCK_ID = 0;

export class KVBlock {
  refCount = 0;
  blockHash: BlockHash | null = null;
  /** Hash of the previous block of the chain (null for a first block); set while cached. */
  parentHash: BlockHash | null = null;
  /** Extra keys (cache salt, LoRA id) hashed with this block; set while cached. */
  extraKey = '';
  /** Token ids of the full cached block, kept to verify a hash hit. */
  tokenIds: readonly number[] | null = null;
  /** The KV cache group whose prefix cache holds the block; set while cached. */
  cacheGroupId = 0;
  prevFree: KVBlock | null = null;
  nextFree: KVBlock | null = null;

  constructor(readonly blockId: number) {}
}

/** Doubly linked list of free blocks with O(1) removal from the middle. */
class FreeBlockQueue {
  private readonly head = new KVBlock(-1);
  private readonly tail = new KVBlock(-1);
  numFreeBlocks = 0;

  constructor() {
    this.head.nextFree = this.tail;
    this.tail.prevFree = this.head;
  }

  popLeft(): KVBlock {
    const block = this.head.nextFree!;
    if (block === this.tail) throw new Error('no free blocks');
    this.remove(block);
    return block;
  }

  remove(block: KVBlock): void {
    const prev = block.prevFree;
    const next = block.nextFree;
    if (prev === null || next === null) throw new Error(`block ${block.blockId} is not free`);
    prev.nextFree = next;
    next.prevFree = prev;
    block.prevFree = null;
    block.nextFree = null;
    this.numFreeBlocks--;
  }

  append(block: KVBlock): void {
    const last = this.tail.prevFree!;
    last.nextFree = block;
    block.prevFree = last;
    block.nextFree = this.tail;
    this.tail.prevFree = block;
    this.numFreeBlocks++;
  }

  blockIds(): number[] {
    const ids: number[] = [];
    for (let b = this.head.nextFree!; b !== this.tail; b = b.nextFree!) ids.push(b.blockId);
    return ids;
  }
}

export interface CachedBlockKey {
  blockHash: BlockHash;
  parentHash: BlockHash | null;
  extraKey: string;
  tokenIds: readonly number[];
}

export class BlockPool {
  private readonly blocks: KVBlock[];
  private readonly freeQueue = new FreeBlockQueue();
  /** One hash -> block map per KV cache group, made on first use. */
  private readonly cachedBlocks: Map<BlockHash, KVBlock>[] = [new Map()];
  numEvictions = 0;

  constructor(readonly numBlocks: number) {
    if (!Number.isInteger(numBlocks) || numBlocks < 2) {
      throw new Error(`numBlocks must be an integer >= 2 (block 0 is reserved), got ${numBlocks}`);
    }
    this.blocks = Array.from({ length: numBlocks }, (_, i) => new KVBlock(i));
    for (let i = 1; i < numBlocks; i++) this.freeQueue.append(this.blocks[i]!);
  }

  get numFreeBlocks(): number {
    return this.freeQueue.numFreeBlocks;
  }

  /** Blocks that can be handed out: all but the null block. */
  get numUsableBlocks(): number {
    return this.numBlocks - 1;
  }

  /** Fraction of usable blocks held by some request, 0..1. */
  usage(): number {
    return 1 - this.numFreeBlocks / this.numUsableBlocks;
  }

  block(blockId: number): KVBlock {
    const b = this.blocks[blockId];
    if (b === undefined) throw new Error(`no block ${blockId}`);
    return b;
  }

  /** Takes n blocks from the head of the free queue (evicting cached ones); refCount 1 each. */
  getNewBlocks(n: number): KVBlock[] {
    if (n > this.numFreeBlocks) throw new Error(`asked for ${n} blocks, ${this.numFreeBlocks} free`);
    const out: KVBlock[] = [];
    for (let i = 0; i < n; i++) {
      const b = this.freeQueue.popLeft();
      this.evict(b);
      b.refCount = 1;
      out.push(b);
    }
    return out;
  }

  getCachedBlock(blockHash: BlockHash, groupId = 0): KVBlock | null {
    return this.cachedBlocks[groupId]?.get(blockHash) ?? null;
  }

  /** Takes a reference on each block; a free (cached) block leaves the free queue. */
  touch(blocks: readonly KVBlock[]): void {
    for (const b of blocks) {
      if (b.refCount === 0) this.freeQueue.remove(b);
      b.refCount++;
    }
  }

  /** Drops a reference on each block, in the given order: the first to reach 0 is evicted first. */
  freeBlocks(blocksInEvictionOrder: readonly KVBlock[]): void {
    for (const b of blocksInEvictionOrder) {
      if (b.refCount <= 0) throw new Error(`block ${b.blockId} freed with refCount ${b.refCount}`);
      b.refCount--;
      if (b.refCount === 0) this.freeQueue.append(b);
    }
  }

  /** Registers a full block under its hash in a group's cache; false when another block already holds that hash there. */
  cacheBlock(block: KVBlock, key: CachedBlockKey, groupId = 0): boolean {
    if (block.blockHash !== null) return block.blockHash === key.blockHash && block.cacheGroupId === groupId;
    const cached = this.cacheOf(groupId);
    if (cached.has(key.blockHash)) return false;
    block.blockHash = key.blockHash;
    block.parentHash = key.parentHash;
    block.extraKey = key.extraKey;
    block.tokenIds = key.tokenIds;
    block.cacheGroupId = groupId;
    cached.set(key.blockHash, block);
    return true;
  }

  /** Drops the block's hash (its KV will not be what the hash says). */
  uncacheBlock(block: KVBlock): void {
    if (block.blockHash === null) return;
    this.cachedBlocks[block.cacheGroupId]!.delete(block.blockHash);
    this.clearHash(block);
  }

  get numCachedBlocks(): number {
    let n = 0;
    for (const m of this.cachedBlocks) n += m.size;
    return n;
  }

  /** Block ids of the free queue, head (next evicted) first. */
  freeBlockIds(): number[] {
    return this.freeQueue.blockIds();
  }

  /** Drops every hash; refused (false) while any block is in use. */
  resetPrefixCache(): boolean {
    if (this.numFreeBlocks !== this.numUsableBlocks) return false;
    for (const m of this.cachedBlocks) {
      for (const b of m.values()) this.clearHash(b);
      m.clear();
    }
    return true;
  }

  private evict(block: KVBlock): void {
    if (block.blockHash === null) return;
    this.cachedBlocks[block.cacheGroupId]!.delete(block.blockHash);
    this.clearHash(block);
    this.numEvictions++;
  }

  private cacheOf(groupId: number): Map<BlockHash, KVBlock> {
    if (!Number.isInteger(groupId) || groupId < 0) throw new Error(`bad KV cache group ${groupId}`);
    while (this.cachedBlocks.length <= groupId) this.cachedBlocks.push(new Map());
    return this.cachedBlocks[groupId]!;
  }

  private clearHash(block: KVBlock): void {
    block.blockHash = null;
    block.parentHash = null;
    block.extraKey = '';
    block.tokenIds = null;
    block.cacheGroupId = 0;
  }
}
