import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { KVCacheManager, bytesPerKvBlock, hashBlockTokens, numBlocksForBytes, type KVRequest }
  from '../../src/kv/kv-cache-manager.js';
import { runPrompt } from './helpers.js';

function req(requestId: string, tokens: number[], cacheSalt: string | null = null): KVRequest & { allTokenIds: number[] } {
  return { requestId, allTokenIds: [...tokens], cacheSalt, numComputedTokens: 0, blockHashes: [] };
}

const range = (a: number, b: number) => Array.from({ length: b - a }, (_, i) => a + i);


test('full blocks of a computed prompt are shared by a later prompt with the same prefix; the partial block is not', () => {
  const kv = new KVCacheManager({ numBlocks: 11, blockSize: 4, enablePrefixCaching: true });
  const a = req('a', range(0, 10));
  assert.deepEqual(runPrompt(kv, a), [1, 2, 3]);
  assert.equal(kv.pool.numCachedBlocks, 2);
  const b = req('b', [...range(0, 10), 50]);
  const hit = kv.getComputedBlocks(b);
  assert.deepEqual(hit, { blockIds: [1, 2], numCachedTokens: 8 });
  assert.deepEqual(kv.allocateSlots(b, 3, hit), [4]);
  assert.deepEqual(kv.blockTable('b'), [1, 2, 4]);
  assert.deepEqual([1, 2, 3, 4].map((i) => kv.pool.block(i).refCount), [2, 2, 1, 1]);
  assert.equal(kv.prefixCacheQueries, 10 + 11);
  assert.equal(kv.prefixCacheHits, 8);
  assert.equal(kv.numFreeBlocks, 6);
  assert.equal(kv.usage(), 4 / 10);
});

test('the last token is always recomputed: a fully cached prompt hits all but its last block', () => {
  const kv = new KVCacheManager({ numBlocks: 11, blockSize: 4, enablePrefixCaching: true });
  runPrompt(kv, req('a', range(0, 12)));
  assert.deepEqual(kv.getComputedBlocks(req('b', range(0, 8))), { blockIds: [1], numCachedTokens: 4 });
  assert.deepEqual(kv.getComputedBlocks(req('c', range(0, 9))), { blockIds: [1, 2], numCachedTokens: 8 });
  assert.deepEqual(kv.getComputedBlocks(req('d', range(0, 3))), { blockIds: [], numCachedTokens: 0 });
});

test('cache salt isolates prefixes: same salt hits, other salt or none misses', () => {
  const kv = new KVCacheManager({ numBlocks: 11, blockSize: 4, enablePrefixCaching: true });
  runPrompt(kv, req('a', range(0, 9), 'tenant-1'));
  assert.equal(kv.getComputedBlocks(req('b', range(0, 9), 'tenant-1')).numCachedTokens, 8);
  assert.equal(kv.getComputedBlocks(req('c', range(0, 9), 'tenant-2')).numCachedTokens, 0);
  assert.equal(kv.getComputedBlocks(req('d', range(0, 9))).numCachedTokens, 0);
  runPrompt(kv, req('e', range(0, 9)));
  assert.equal(kv.getComputedBlocks(req('f', range(0, 9))).numCachedTokens, 8);
});

test('extra hash keys (LoRA hook) separate otherwise equal prefixes', () => {
  const lora = new Map<string, string>([['a', 'lora-x'], ['b', 'lora-x'], ['c', 'lora-y']]);
  const kv = new KVCacheManager({ numBlocks: 11, blockSize: 4, enablePrefixCaching: true,
    extraHashKeys: (r) => lora.get(r.requestId) ?? null });
  runPrompt(kv, req('a', range(0, 9)));
  assert.equal(kv.getComputedBlocks(req('b', range(0, 9))).numCachedTokens, 8);
  assert.equal(kv.getComputedBlocks(req('c', range(0, 9))).numCachedTokens, 0);
});

test('a hash hit is verified against the stored token ids', () => {
  const kv = new KVCacheManager({ numBlocks: 11, blockSize: 4, enablePrefixCaching: true });
  const x = req('x', range(0, 9));
  assert.equal(kv.getComputedBlocks(x).numCachedTokens, 0);
  const y = req('y', range(100, 109));
  kv.allocateSlots(y, 9);
  // A colliding entry: y's first page registered under x's first hash.
  kv.pool.cacheBlock(kv.pool.block(kv.blockTable('y')[0]!),
    { blockHash: x.blockHashes[0]!, parentHash: null, extraKey: '', tokenIds: range(100, 104) });
  assert.deepEqual(kv.getComputedBlocks(x), { blockIds: [], numCachedTokens: 0 });
});

test('a hit is verified against the stored parent hash as well as the tokens', () => {
  const kv = new KVCacheManager({ numBlocks: 11, blockSize: 4, enablePrefixCaching: true });
  const x = req('x', range(0, 9));
  runPrompt(kv, x);
  const y = req('y', [...range(50, 54), ...range(4, 8), 9]);
  kv.getComputedBlocks(y);
  const second = kv.pool.block(kv.blockTable('x')[1]!);
  // y's second hash forged onto x's second page: same tokens, other parent.
  kv.pool.uncacheBlock(second);
  kv.pool.cacheBlock(second, { blockHash: y.blockHashes[1]!, parentHash: x.blockHashes[0]!, extraKey: '',
    tokenIds: range(4, 8) });
  runPrompt(kv, req('z', [...range(50, 54), 99]));
  assert.deepEqual(kv.getComputedBlocks(y).numCachedTokens, 4);
});

test('hashes chain over the parent: same block tokens after a different prefix do not hit', () => {
  const kv = new KVCacheManager({ numBlocks: 11, blockSize: 4, enablePrefixCaching: true });
  runPrompt(kv, req('a', [...range(0, 4), ...range(10, 14), 99]));
  assert.deepEqual(kv.getComputedBlocks(req('b', [...range(20, 24), ...range(10, 14), 99])).blockIds, []);
  assert.notEqual(hashBlockTokens(null, [1, 2], ''), hashBlockTokens(null, [1, 2], 'salt=s'));
  assert.equal(hashBlockTokens(null, [1, 2], '').length, 64);
});

test('a block hash is sha256 of parent (or "root"), NUL, extra key, NUL, the token ids as little-endian int32', () => {
  const ids = [0, 7, 151935, 2 ** 31 - 1];
  const bytes = new Uint8Array(new Int32Array(ids).buffer);
  const parent = hashBlockTokens(null, [5], '');
  for (const [p, key] of [[null, ''], [parent, 'salt=é;x=1']] as const) {
    const want = createHash('sha256').update(`${p ?? 'root'}\0${key}\0`).update(bytes).digest('hex');
    assert.equal(hashBlockTokens(p, ids, key), want);
  }
});

test('a block hash reads tokenIds[start, start + count) in place, and any key length', () => {
  const ids = Array.from({ length: 80 }, (_, i) => (i * 7919) % 151936);
  const parent = hashBlockTokens(null, [5], '');
  for (let start = 0; start < 80; start += 16) {
    assert.equal(hashBlockTokens(parent, ids, '', start, 16), hashBlockTokens(parent, ids.slice(start, start + 16), ''));
  }
  const longKey = `salt=${'é'.repeat(700)}`;  // beyond the first scratch buffer, two UTF-8 bytes a character
  const bytes = new Uint8Array(new Int32Array(ids.slice(16, 32)).buffer);
  const want = createHash('sha256').update(`root\0${longKey}\0`).update(bytes).digest('hex');
  assert.equal(hashBlockTokens(null, ids, longKey, 16, 16), want);
  assert.equal(hashBlockTokens(null, ids.slice(16, 32), longKey), want);
});

test('free releases pages tail-first: shared prefix pages end at the tail and are evicted last', () => {
  const kv = new KVCacheManager({ numBlocks: 11, blockSize: 4, enablePrefixCaching: true });
  const a = req('a', range(0, 10));
  runPrompt(kv, a);
  const b = req('b', [...range(0, 8), 77, 78, 79]);
  runPrompt(kv, b);
  assert.deepEqual(kv.blockTable('b'), [1, 2, 4]);
  kv.free(a);
  assert.deepEqual(kv.pool.freeBlockIds(), [5, 6, 7, 8, 9, 10, 3]);
  assert.deepEqual([1, 2].map((i) => kv.pool.block(i).refCount), [1, 1]);
  kv.free(b);
  assert.deepEqual(kv.pool.freeBlockIds(), [5, 6, 7, 8, 9, 10, 3, 4, 2, 1]);
  assert.deepEqual(kv.blockTable('b'), []);
  assert.equal(kv.usage(), 0);
});

test('LRU eviction: the oldest free page goes first, and evicting a page drops its hash', () => {
  const kv = new KVCacheManager({ numBlocks: 11, blockSize: 4, enablePrefixCaching: true });
  const a = req('a', range(0, 10));
  runPrompt(kv, a);
  kv.free(a);
  assert.deepEqual(kv.pool.freeBlockIds(), [4, 5, 6, 7, 8, 9, 10, 3, 2, 1]);
  assert.deepEqual(kv.allocateSlots(req('big', range(500, 532)), 32), [4, 5, 6, 7, 8, 9, 10, 3]);
  assert.deepEqual(kv.getComputedBlocks(req('p', range(0, 10))).blockIds, [1, 2]);
  assert.deepEqual(kv.allocateSlots(req('small', range(600, 604)), 4), [2]);
  assert.deepEqual(kv.getComputedBlocks(req('q', range(0, 10))).blockIds, [1]);
  assert.deepEqual(kv.allocateSlots(req('small2', range(700, 704)), 4), [1]);
  assert.deepEqual(kv.getComputedBlocks(req('r', range(0, 10))).blockIds, []);
  assert.equal(kv.pool.numEvictions, 2);
});

test('allocateSlots returns null and changes nothing when pages are short, counting evictable hits', () => {
  const kv = new KVCacheManager({ numBlocks: 6, blockSize: 4, enablePrefixCaching: true });
  const a = req('a', range(0, 9));
  runPrompt(kv, a);
  kv.free(a);
  // free queue: 4 5 3 2 1, with 1 and 2 cached. b hits [1, 2] and needs 3 more pages:
  // 3 new + 2 hits leaving the free queue = 5 <= 5 fits; c needs 4 new + 2 = 6 > 5.
  const c = req('c', [...range(0, 8), ...range(40, 53)]);
  const hitC = kv.getComputedBlocks(c);
  assert.deepEqual(hitC.blockIds, [1, 2]);
  const before = kv.pool.freeBlockIds();
  assert.equal(kv.allocateSlots(c, 13, hitC), null);
  assert.deepEqual(kv.pool.freeBlockIds(), before);
  assert.deepEqual(kv.blockTable('c'), []);
  assert.deepEqual([1, 2].map((i) => kv.pool.block(i).refCount), [0, 0]);
  const b = req('b', [...range(0, 8), ...range(40, 49)]);
  const hitB = kv.getComputedBlocks(b);
  assert.deepEqual(kv.allocateSlots(b, 9, hitB), [4, 5, 3]);
  assert.deepEqual(kv.blockTable('b'), [1, 2, 4, 5, 3]);
  assert.equal(kv.numFreeBlocks, 0);
});

test('growing a request allocates only when it crosses a page boundary', () => {
  const kv = new KVCacheManager({ numBlocks: 6, blockSize: 4, enablePrefixCaching: false });
  const a = req('a', range(0, 3));
  assert.deepEqual(kv.allocateSlots(a, 3), [1]);
  a.numComputedTokens = 3;
  assert.deepEqual(kv.allocateSlots(a, 1), []);
  a.numComputedTokens = 4;
  assert.deepEqual(kv.allocateSlots(a, 1), [2]);
  assert.deepEqual(kv.blockTable('a'), [1, 2]);
});

test('generated tokens fill blocks that are cached too, once their slots are allocated', () => {
  const kv = new KVCacheManager({ numBlocks: 11, blockSize: 4, enablePrefixCaching: true });
  const a = req('a', range(0, 6));
  runPrompt(kv, a);
  assert.equal(kv.pool.numCachedBlocks, 1);
  a.allTokenIds.push(90, 91);
  kv.allocateSlots(a, 1);
  a.numComputedTokens = 7;
  kv.cacheFullBlocks(a);
  assert.equal(kv.pool.numCachedBlocks, 1);
  kv.allocateSlots(a, 1);
  assert.equal(kv.pool.numCachedBlocks, 2);
  assert.deepEqual(kv.getComputedBlocks(req('b', [...range(0, 6), 90, 91, 5])).blockIds, [1, 2]);
});

test('with prefix caching off nothing is hashed or hit', () => {
  const kv = new KVCacheManager({ numBlocks: 11, blockSize: 4, enablePrefixCaching: false });
  runPrompt(kv, req('a', range(0, 9)));
  assert.equal(kv.pool.numCachedBlocks, 0);
  assert.deepEqual(kv.getComputedBlocks(req('b', range(0, 9))).blockIds, []);
  assert.equal(kv.prefixCacheQueries, 0);
});

test('sizes from bytes', () => {
  const perBlock = bytesPerKvBlock(16, 28, 8, 128, 2);
  assert.equal(perBlock, 2 * 16 * 28 * 8 * 128 * 2);
  assert.equal(numBlocksForBytes(10 * perBlock + perBlock - 1, perBlock), 10);
  assert.equal(numBlocksForBytes(0, perBlock), 0);
  assert.throws(() => numBlocksForBytes(100, 0), /bytesPerBlock/);
});

test('a later request in the same step hits pages allocated but not yet computed', () => {
  const kv = new KVCacheManager({ numBlocks: 11, blockSize: 4, enablePrefixCaching: true });
  const a = req('a', range(0, 10));
  assert.deepEqual(kv.allocateSlots(a, 10), [1, 2, 3]);
  assert.deepEqual(kv.getComputedBlocks(req('b', range(0, 10))).blockIds, [1, 2]);
});

test('pages freed before they were computed lose their hash; computed ones keep it', () => {
  const kv = new KVCacheManager({ numBlocks: 11, blockSize: 4, enablePrefixCaching: true });
  const a = req('a', range(0, 14));
  kv.allocateSlots(a, 6);
  a.numComputedTokens = 6;
  assert.deepEqual(kv.allocateSlots(a, 8), [3, 4]);
  assert.equal(kv.pool.numCachedBlocks, 3);
  kv.free(a);
  assert.deepEqual(kv.pool.freeBlockIds(), [5, 6, 7, 8, 9, 10, 4, 3, 2, 1]);
  assert.deepEqual([1, 2, 3].map((b) => kv.pool.block(b).blockHash !== null), [true, false, false]);
  assert.deepEqual(kv.getComputedBlocks(req('b', range(0, 14))).blockIds, [1]);
});
