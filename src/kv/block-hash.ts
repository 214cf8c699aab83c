// The prefix cache's keys: full blocks hashed with SHA-256 chained over the
// parent block's hash, the extra keys (cache salt in the first block, LoRA id
// by hook) and the block's token ids.
//
//   tokens:  [t0 .. t15][t16 .. t31][t32 .. t37 ·········]   blockSize 16
//   hashes:   h0 = H(root, salt, t0..15)
//                        h1 = H(h0, t16..31)
//                                   (partial: never hashed)
//
// A request's hashes depend on its tokens alone, so every KV cache group of the
// same block size reads the same chain (the pool keys its cache by group too).

import * as crypto from 'node:crypto';
import type { BlockHash, KVBlock } from './block-pool.js';

/** What the KV cache manager reads of a request. */
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

/** Extra key hashed into block `blockIndex` (e.g. a LoRA adapter id); null for none. */
export type ExtraHashKeys = (request: KVRequest, blockIndex: number) => string | null;

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

/** A request's chain of block hashes, and the check that a cached block really holds its tokens. */
export class BlockHasher {
  constructor(readonly blockSize: number, private readonly extraHashKeys: ExtraHashKeys | undefined) {}

  /** Fills req.blockHashes up to its first `numFullBlocks` blocks. */
  ensureBlockHashes(req: KVRequest, numFullBlocks: number): void {
    const hashes = req.blockHashes;
    for (let i = hashes.length; i < numFullBlocks; i++) {
      const start = i * this.blockSize;
      hashes.push(hashBlockTokens(i === 0 ? null : hashes[i - 1]!, req.allTokenIds, this.extraKey(req, i), start,
        this.blockSize));
    }
  }

  /** The cached block holds block `i` of the request: same parent, extra key and token ids, not just the hash. */
  matches(block: KVBlock, req: KVRequest, i: number, parent: BlockHash | null): boolean {
    const stored = block.tokenIds;
    if (stored === null || block.parentHash !== parent || block.extraKey !== this.extraKey(req, i)) return false;
    const start = i * this.blockSize;
    for (let j = 0; j < this.blockSize; j++) {
      if (stored[j] !== req.allTokenIds[start + j]) return false;
    }
    return true;
  }

  extraKey(req: KVRequest, blockIndex: number): string {
    if (blockIndex > 0 && this.extraHashKeys === undefined) return '';  // the salt keys the first block alone
    const parts: string[] = [];
    if (blockIndex === 0 && req.cacheSalt !== null) parts.push(`salt=${req.cacheSalt}`);
    const extra = this.extraHashKeys?.(req, blockIndex) ?? null;
    if (extra !== null) parts.push(`x=${extra}`);
    return parts.join(';');
  }
}
