import { test } from 'node:test';
import assert from 'node:assert/strict';
import { BlockPool, NULL_BLOCK_ID, type BlockHash } from '../../src/kv/block-pool.js';

const key = (h: string, tokenIds: number[]) => ({ blockHash: h as BlockHash, parentHash: null, extraKey: '', tokenIds });

test('block 0 is the null block: never in the free queue, never handed out', () => {
  const pool = new BlockPool(4);
  assert.equal(NULL_BLOCK_ID, 0);
  assert.deepEqual(pool.freeBlockIds(), [1, 2, 3]);
  assert.equal(pool.numFreeBlocks, 3);
  assert.deepEqual(pool.getNewBlocks(3).map((b) => b.blockId), [1, 2, 3]);
  assert.throws(() => pool.getNewBlocks(1), /asked for 1 blocks, 0 free/);
  assert.throws(() => new BlockPool(1), /numBlocks/);
});

test('freed blocks go to the tail in the order given; new blocks come from the head', () => {
  const pool = new BlockPool(6);
  const [b1, b2, b3] = pool.getNewBlocks(3);
  assert.deepEqual(pool.freeBlockIds(), [4, 5]);
  pool.freeBlocks([b3!, b1!, b2!]);
  assert.deepEqual(pool.freeBlockIds(), [4, 5, 3, 1, 2]);
  assert.deepEqual(pool.getNewBlocks(3).map((b) => b.blockId), [4, 5, 3]);
  assert.equal(pool.usage(), 3 / 5);
});

test('touching a free cached block removes it from the middle of the queue', () => {
  const pool = new BlockPool(6);
  const blocks = pool.getNewBlocks(5);
  assert.ok(pool.cacheBlock(blocks[2]!, key('h3', [7, 8])));
  pool.freeBlocks(blocks);
  assert.deepEqual(pool.freeBlockIds(), [1, 2, 3, 4, 5]);
  const hit = pool.getCachedBlock('h3' as BlockHash)!;
  assert.equal(hit.blockId, 3);
  pool.touch([hit]);
  assert.equal(hit.refCount, 1);
  assert.deepEqual(pool.freeBlockIds(), [1, 2, 4, 5]);
  pool.touch([hit]);
  assert.equal(hit.refCount, 2);
  pool.freeBlocks([hit]);
  assert.deepEqual(pool.freeBlockIds(), [1, 2, 4, 5]);
  pool.freeBlocks([hit]);
  assert.deepEqual(pool.freeBlockIds(), [1, 2, 4, 5, 3]);
  assert.throws(() => pool.freeBlocks([hit]), /refCount 0/);
});

test('taking a cached block from the free queue evicts its hash', () => {
  const pool = new BlockPool(3);
  const [b1, b2] = pool.getNewBlocks(2);
  pool.cacheBlock(b1!, key('a', [1]));
  pool.cacheBlock(b2!, key('b', [2]));
  pool.freeBlocks([b1!, b2!]);
  assert.equal(pool.numCachedBlocks, 2);
  const [taken] = pool.getNewBlocks(1);
  assert.equal(taken!.blockId, 1);
  assert.equal(taken!.blockHash, null);
  assert.equal(taken!.tokenIds, null);
  assert.equal(pool.getCachedBlock('a' as BlockHash), null);
  assert.equal(pool.getCachedBlock('b' as BlockHash)!.blockId, 2);
  assert.equal(pool.numEvictions, 1);
});

test('a hash held by one block is not registered for a second', () => {
  const pool = new BlockPool(3);
  const [b1, b2] = pool.getNewBlocks(2);
  assert.equal(pool.cacheBlock(b1!, key('a', [1])), true);
  assert.equal(pool.cacheBlock(b2!, key('a', [1])), false);
  assert.equal(b2!.blockHash, null);
  assert.equal(pool.getCachedBlock('a' as BlockHash), b1);
});

test('resetPrefixCache drops every hash only when nothing is in use', () => {
  const pool = new BlockPool(3);
  const [b1] = pool.getNewBlocks(1);
  pool.cacheBlock(b1!, key('a', [1]));
  assert.equal(pool.resetPrefixCache(), false);
  pool.freeBlocks([b1!]);
  assert.equal(pool.resetPrefixCache(), true);
  assert.equal(pool.getCachedBlock('a' as BlockHash), null);
  assert.equal(b1!.blockHash, null);
});
