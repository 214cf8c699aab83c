// Pages per request on top of the BlockPool, and the prefix cache: full blocks
// are registered under a SHA-256 hash chained over the parent block's hash,
// the extra keys (cache salt in the first block, LoRA id by hook) and the
// block's token ids.
//
//   tokens:  [t0 .. t15][t16 .. t31][t32 .. t37 ·········]   blockSize 16
//   hashes:   h0 = H(root, salt, t0..15)
//                        h1 = H(h0, t16..31)
//                                   (partial: never hashed)
//
// A full block is registered when its slots are allocated, before the step
// that computes it (as vLLM): a request admitted later in the same step may hit
// it, reading KV that an earlier row of the same forward pass writes (every
// backend writes a layer's slots before that layer's attention). A request
// freed before its blocks were computed (preempted in the step that allocated
// them) unregisters them, so no hit ever reads a page that was never written.

import * as crypto from 'node:crypto';
import { BlockPool, type BlockHash, type KVBlock } from './block-pool.js';

/** What the manager reads of a request. */
export interface KVRequest {
  readonly requestId: string;
  /** Prompt tokens, then generated tokens. */
  readonly allTokenIds: readonly number[];
  readonly cacheSalt: string | null;
  /** Tokens whose KV is in the cache. */
  numComputedTokens: number;
  /** Hashes of the request's full blocks, filled lazily by the manager. */
  blockHashes: BlockHash[];
  /** Scheduled tokens not sampled yet, at the tail of allTokenIds (never hashed). */
  readonly numPlaceholders?: number;
}

export interface KVCacheManagerOptions {
  numBlocks: number;
  blockSize: number;
  enablePrefixCaching: boolean;
  /** Extra key hashed into block `blockIndex` (e.g. a LoRA adapter id); null for none. */
  extraHashKeys?: (request: KVRequest, blockIndex: number) => string | null;
}

/** A prefix-cache hit: leading full blocks whose KV can be reused. */
export interface ComputedBlocks {
  blockIds: readonly number[];
  numCachedTokens: number;
}

export const NO_COMPUTED_BLOCKS: ComputedBlocks = Object.freeze({ blockIds: [], numCachedTokens: 0 });

/** Node >= 20.12 hashes a buffer in one call, without a Hash object (several times faster on block-sized input). */
const oneShotHash = (crypto as { hash?: (algorithm: string, data: Uint8Array, encoding: 'hex') => string }).hash;

/** Bytes a block's hash input is written into (grown on demand; hashing is synchronous, so one serves all). */
let scratch = Buffer.allocUnsafe(256);
let scratchView = new DataView(scratch.buffer, scratch.byteOffset, scratch.byteLength);

/**
 * sha256 over `parent ?? 'root'`, NUL, the extra key, NUL (UTF-8), then tokenIds[start, start + count) as
 * little-endian int32 (hex).
 */
export function hashBlockTokens(parentHash: BlockHash | null, tokenIds: readonly number[], extraKey: string,
  start = 0, count = tokenIds.length - start): BlockHash {
  const parent = parentHash ?? 'root';
  const bound = 3 * (parent.length + extraKey.length) + 2 + 4 * count;  // UTF-8 takes at most 3 bytes a UTF-16 unit
  if (scratch.length < bound) {
    scratch = Buffer.allocUnsafe(2 * bound);
    scratchView = new DataView(scratch.buffer, scratch.byteOffset, scratch.byteLength);
  }
  let at = scratch.write(parent, 0, 'utf8');
  scratch[at++] = 0;
  if (extraKey.length > 0) at += scratch.write(extraKey, at, 'utf8');
  scratch[at++] = 0;
  for (let i = 0; i < count; i++, at += 4) scratchView.setInt32(at, tokenIds[start + i]!, true);
  const data = scratch.subarray(0, at);
  const hex = oneShotHash ? oneShotHash('sha256', data, 'hex') : crypto.createHash('sha256').update(data).digest('hex');
  return hex as BlockHash;
}

export function numBlocksForBytes(bytes: number, bytesPerBlock: number): number {
  if (!(bytesPerBlock > 0)) throw new Error(`bytesPerBlock must be > 0, got ${bytesPerBlock}`);
  return Math.max(0, Math.floor(bytes / bytesPerBlock));
}

/** K and V of one page over all layers. */
export function bytesPerKvBlock(blockSize: number, numLayers: number, numKvHeads: number,
  headDim: number, bytesPerElement: number): number {
  return 2 * blockSize * numLayers * numKvHeads * headDim * bytesPerElement;
}

export class KVCacheManager {
  readonly pool: BlockPool;
  readonly blockSize: number;
  readonly enablePrefixCaching: boolean;
  private readonly extraHashKeys: KVCacheManagerOptions['extraHashKeys'];
  private readonly blocksOf = new Map<string, KVBlock[]>();
  private readonly blockIdsOf = new Map<string, number[]>();
  /** Leading blocks of each request already registered in the prefix cache. */
  private readonly numCachedBlocksOf = new Map<string, number>();
  /** Prompt tokens looked up in the prefix cache (vLLM's queries, in tokens). */
  prefixCacheQueries = 0;
  /** Tokens found in the prefix cache. */
  prefixCacheHits = 0;

  constructor(o: KVCacheManagerOptions) {
    if (!Number.isInteger(o.blockSize) || o.blockSize < 1) throw new Error(`bad blockSize ${o.blockSize}`);
    this.pool = new BlockPool(o.numBlocks);
    this.blockSize = o.blockSize;
    this.enablePrefixCaching = o.enablePrefixCaching;
    this.extraHashKeys = o.extraHashKeys;
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

  /**
   * The longest run of leading full blocks found in the prefix cache. Never the
   * whole sequence: its last token is always recomputed so that it yields logits.
   */
  getComputedBlocks(req: KVRequest): ComputedBlocks {
    if (!this.enablePrefixCaching) return NO_COMPUTED_BLOCKS;
    const numTokens = req.allTokenIds.length;
    const maxBlocks = Math.floor(Math.max(0, numTokens - 1) / this.blockSize);
    this.ensureBlockHashes(req, maxBlocks);
    const blockIds: number[] = [];
    let parent: BlockHash | null = null;
    for (let i = 0; i < maxBlocks; i++) {
      const hash = req.blockHashes[i]!;
      const block = this.pool.getCachedBlock(hash);
      if (block === null || !this.matches(block, req, i, parent)) break;
      blockIds.push(block.blockId);
      parent = hash;
    }
    const numCachedTokens = blockIds.length * this.blockSize;
    this.prefixCacheQueries += numTokens;
    this.prefixCacheHits += numCachedTokens;
    return { blockIds, numCachedTokens };
  }

  /**
   * Pages for `numNewTokens` more tokens (after the computed ones and the hit in
   * `computed`). Returns the ids of the pages newly taken from the free queue,
   * or null when memory is short, in which case nothing has changed.
   */
  allocateSlots(req: KVRequest, numNewTokens: number, computed: ComputedBlocks = NO_COMPUTED_BLOCKS):
    number[] | null {
    const id = req.requestId;
    const blocks = this.blocksOf.get(id) ?? [];
    if (computed.blockIds.length > 0 && blocks.length > 0) {
      throw new Error(`request ${id}: a prefix hit can only start a request with no pages`);
    }
    const hitBlocks = computed.blockIds.map((b) => this.pool.block(b));
    const numTokensAfter = req.numComputedTokens + computed.numCachedTokens + numNewTokens;
    const numRequired = Math.ceil(numTokensAfter / this.blockSize);
    const numNewBlocks = Math.max(0, numRequired - blocks.length - hitBlocks.length);
    let numEvictableHits = 0;
    for (const b of hitBlocks) if (b.refCount === 0) numEvictableHits++;
    if (numNewBlocks + numEvictableHits > this.pool.numFreeBlocks) return null;

    this.pool.touch(hitBlocks);
    const newBlocks = this.pool.getNewBlocks(numNewBlocks);
    const ids = this.blockIdsOf.get(id) ?? [];
    for (const b of hitBlocks) { blocks.push(b); ids.push(b.blockId); }
    for (const b of newBlocks) { blocks.push(b); ids.push(b.blockId); }
    this.blocksOf.set(id, blocks);
    this.blockIdsOf.set(id, ids);
    if (!this.numCachedBlocksOf.has(id)) this.numCachedBlocksOf.set(id, hitBlocks.length);
    this.cacheFullBlocks(req, numTokensAfter);
    return newBlocks.map((b) => b.blockId);
  }

  /** Registers the request's full blocks among its first `numTokens` tokens (computed or being computed). */
  cacheFullBlocks(req: KVRequest, numTokens = req.numComputedTokens): void {
    if (!this.enablePrefixCaching) return;
    const blocks = this.blocksOf.get(req.requestId);
    if (blocks === undefined) return;
    const numKnown = req.allTokenIds.length - (req.numPlaceholders ?? 0);
    const numFull = Math.min(Math.floor(Math.min(numTokens, numKnown) / this.blockSize), blocks.length);
    const start = this.numCachedBlocksOf.get(req.requestId) ?? 0;
    if (numFull <= start) return;
    this.ensureBlockHashes(req, numFull);
    for (let i = start; i < numFull; i++) {
      // false: another page already holds this hash; this one stays private.
      this.pool.cacheBlock(blocks[i]!, {
        blockHash: req.blockHashes[i]!,
        parentHash: i === 0 ? null : req.blockHashes[i - 1]!,
        extraKey: this.extraKey(req, i),
        tokenIds: req.allTokenIds.slice(i * this.blockSize, (i + 1) * this.blockSize),
      });
    }
    this.numCachedBlocksOf.set(req.requestId, numFull);
  }

  /**
   * Releases every page of the request, last page first: shared prefix pages are
   * evicted last. Pages past its computed tokens lose their hash.
   */
  free(req: KVRequest): void {
    const id = req.requestId;
    const blocks = this.blocksOf.get(id);
    if (blocks !== undefined) {
      for (let i = Math.floor(req.numComputedTokens / this.blockSize); i < blocks.length; i++) {
        this.pool.uncacheBlock(blocks[i]!);
      }
      this.pool.freeBlocks([...blocks].reverse());
    }
    this.blocksOf.delete(id);
    this.blockIdsOf.delete(id);
    this.numCachedBlocksOf.delete(id);
  }

  /** Page ids of the request, in sequence order (empty when it holds none). */
  blockTable(requestId: string): readonly number[] {
    return this.blockIdsOf.get(requestId) ?? [];
  }

  /** Request ids that hold pages. */
  requestIds(): string[] {
    return [...this.blocksOf.keys()];
  }

  resetPrefixCache(): boolean {
    return this.pool.resetPrefixCache();
  }

  private matches(block: KVBlock, req: KVRequest, i: number, parent: BlockHash | null): boolean {
    const stored = block.tokenIds;
    if (stored === null || block.parentHash !== parent || block.extraKey !== this.extraKey(req, i)) return false;
    const start = i * this.blockSize;
    for (let j = 0; j < this.blockSize; j++) {
      if (stored[j] !== req.allTokenIds[start + j]) return false;
    }
    return true;
  }

  private extraKey(req: KVRequest, blockIndex: number): string {
    if (blockIndex > 0 && this.extraHashKeys === undefined) return '';  // the salt keys the first block alone
    const parts: string[] = [];
    if (blockIndex === 0 && req.cacheSalt !== null) parts.push(`salt=${req.cacheSalt}`);
    const extra = this.extraHashKeys?.(req, blockIndex) ?? null;
    if (extra !== null) parts.push(`x=${extra}`);
    return parts.join(';');
  }

  private ensureBlockHashes(req: KVRequest, numFullBlocks: number): void {
    const hashes = req.blockHashes;
    for (let i = hashes.length; i < numFullBlocks; i++) {
      const start = i * this.blockSize;
      hashes.push(hashBlockTokens(i === 0 ? null : hashes[i - 1]!, req.allTokenIds, this.extraKey(req, i), start,
        this.blockSize));
    }
  }
}
