import { test } from 'node:test';
import assert from 'node:assert/strict';
import { KVCacheManager, type KVRequest } from '../../src/kv/kv-cache-manager.js';
import { BlockPool, type BlockHash } from '../../src/kv/block-pool.js';
import { bytesPerBlock, bytesPerKvBlock, denseGroups, groupLayerSpecs, pageSizeBytes, stateSlotBytes, type KVCacheGroup,
  type KVCacheSpec } from '../../src/kv/kv-cache-spec.js';
import { runPrompt } from './helpers.js';

function req(requestId: string, tokens: number[]): KVRequest & { allTokenIds: number[] } {
  return { requestId, allTokenIds: [...tokens], cacheSalt: null, numComputedTokens: 0, blockHashes: [] };
}

const range = (a: number, b: number) => Array.from({ length: b - a }, (_, i) => a + i);
const full = (numKvHeads: number, headDim: number): KVCacheSpec => ({ kind: 'full_attention', numKvHeads, headDim });
const recurrent = (stateBytes: number): KVCacheSpec => ({ kind: 'recurrent', stateBytes });
/** Two full-attention groups of different shapes (8 and 2 KV heads). */
const TWO_FULL: KVCacheGroup[] = [{ spec: full(8, 128), layers: [0, 2] }, { spec: full(2, 64), layers: [1] }];
/** Full attention and a recurrent state (a hybrid model). */
const HYBRID: KVCacheGroup[] = [{ spec: full(8, 128), layers: [3] }, { spec: recurrent(4096), layers: [0, 1, 2] }];

function kvOf(groups: KVCacheGroup[], numBlocks = 13, enablePrefixCaching = true, numStateSlots = 3): KVCacheManager {
  return new KVCacheManager({ numBlocks, blockSize: 4, enablePrefixCaching, groups, numStateSlots });
}


/** Moves the given free pages to the tail of the free queue, in order. */
function requeue(pool: BlockPool, ids: number[]): void {
  for (const id of ids) {
    pool.touch([pool.block(id)]);
    pool.freeBlocks([pool.block(id)]);
  }
}

test('layers with equal specs share a group, groups in the order of their first layer', () => {
  const groups = groupLayerSpecs([full(8, 128), recurrent(4096), full(8, 128), recurrent(4096), full(4, 64),
    { kind: 'full_attention', numKvHeads: 8, headDim: 128, bytesPerElement: 1 }]);
  assert.deepEqual(groups, [
    { spec: full(8, 128), layers: [0, 2] },
    { spec: recurrent(4096), layers: [1, 3] },
    { spec: full(4, 64), layers: [4] },
    { spec: { kind: 'full_attention', numKvHeads: 8, headDim: 128, bytesPerElement: 1 }, layers: [5] },
  ]);
  assert.deepEqual(denseGroups(3, 8, 128), [{ spec: full(8, 128), layers: [0, 1, 2] }]);
  assert.throws(() => groupLayerSpecs([full(0, 128)]), /bad KV cache spec/);
  assert.throws(() => groupLayerSpecs([recurrent(1.5)]), /bad KV cache spec/);
  assert.throws(() => new KVCacheManager({ numBlocks: 4, blockSize: 4, enablePrefixCaching: false, groups: [] }),
    /no KV cache groups/);
});

test('bytes per page id: a dense model as before; groups share tensors of the largest page', () => {
  assert.equal(pageSizeBytes(full(8, 128), 16, 2), 2 * 16 * 8 * 128 * 2);
  assert.equal(pageSizeBytes({ kind: 'full_attention', numKvHeads: 8, headDim: 128, bytesPerElement: 1 }, 16, 2),
    2 * 16 * 8 * 128);
  assert.equal(pageSizeBytes(recurrent(4096), 16, 2), 4096);
  assert.equal(bytesPerBlock(denseGroups(28, 8, 128), 16, 2), bytesPerKvBlock(16, 28, 8, 128, 2));
  // 2 layers at most in a group, pages of 2*4*8*128*2 = 16384 bytes at most
  assert.equal(bytesPerBlock(TWO_FULL, 4, 2), 2 * 16384);
  // the recurrent layers take no page: one attention layer's page; their state is a slot of 3 layers' states
  assert.equal(bytesPerBlock(HYBRID, 4, 2), 16384);
  assert.equal(stateSlotBytes(HYBRID), 3 * 4096);
  assert.equal(stateSlotBytes(TWO_FULL), 0);
  assert.throws(() => bytesPerBlock([], 4, 2), /no KV cache groups/);
  assert.throws(() => bytesPerBlock([HYBRID[1]!], 4, 2), /no full-attention KV cache group/);
});

test('two full-attention groups: each group its own pages of one shared pool, page ids global', () => {
  const kv = kvOf(TWO_FULL, 13, false);
  assert.equal(kv.numGroups, 2);
  const a = req('a', range(0, 10));
  assert.deepEqual(kv.allocateSlots(a, 10), [1, 2, 3, 4, 5, 6]);
  assert.deepEqual(kv.blockTables('a'), [[1, 2, 3], [4, 5, 6]]);
  assert.deepEqual(kv.blockTable('a'), [1, 2, 3]);
  a.numComputedTokens = 10;
  assert.deepEqual(kv.allocateSlots(a, 2), []);
  a.numComputedTokens = 12;
  assert.deepEqual(kv.allocateSlots(a, 1), [7, 8]);
  assert.deepEqual(kv.blockTables('a'), [[1, 2, 3, 7], [4, 5, 6, 8]]);
  assert.equal(kv.numFreeBlocks, 4);
  assert.deepEqual(kv.maxNumBlocksPerGroup(13), [4, 4]);
});

test('full attention + recurrent state: one state slot per request, of the group\'s own, held whatever the length', () => {
  const kv = kvOf(HYBRID, 13, false);
  assert.deepEqual([kv.hasStateSlots, kv.numStateSlots, kv.numFreeStateSlots], [true, 3, 3]);
  const a = req('a', range(0, 10));
  assert.deepEqual(kv.allocateSlots(a, 10), [1, 2, 3]);
  assert.deepEqual(kv.blockTables('a'), [[1, 2, 3], [0]]);
  assert.equal(kv.stateSlot('a'), 0);
  a.numComputedTokens = 10;
  assert.deepEqual(kv.allocateSlots(a, 3), [4]);
  assert.deepEqual(kv.blockTables('a'), [[1, 2, 3, 4], [0]]);
  const b = req('b', range(0, 1));
  assert.deepEqual(kv.allocateSlots(b, 1), [5]);
  assert.deepEqual(kv.blockTables('b'), [[5], [1]]);
  assert.deepEqual([kv.stateSlot('b'), kv.stateSlot('nobody'), kv.numFreeStateSlots, kv.numFreeBlocks], [1, -1, 1, 7]);
  assert.deepEqual(kv.maxNumBlocksPerGroup(13), [4, 0]);
  assert.deepEqual(kv.requestIds(), ['a', 'b']);
  assert.throws(() => new KVCacheManager({ numBlocks: 4, blockSize: 4, enablePrefixCaching: false, groups: HYBRID }),
    /a recurrent KV cache group needs state slots/);
  assert.throws(() => kvOf([...HYBRID, { spec: recurrent(64), layers: [4] }]), /more than one recurrent KV cache group/);
  const dense = new KVCacheManager({ numBlocks: 4, blockSize: 4, enablePrefixCaching: false, specBackupSlots: true });
  assert.deepEqual([dense.hasStateSlots, dense.numStateSlots, dense.stateSlot('a'), dense.specBackupSlot('a')], [false, 0, -1, -1]);
  // speculative decoding's backups: slot s backs up to s + numStateSlots + numCachedStateSlots; none without them
  assert.deepEqual([kv.specBackupSlot('a'), kv.specBackupSlot('b')], [-1, -1]);
  const backed = new KVCacheManager({ numBlocks: 13, blockSize: 4, enablePrefixCaching: true, groups: HYBRID, numStateSlots: 3,
    numCachedStateSlots: 2, specBackupSlots: true });
  backed.allocateSlots(req('a', range(0, 5)), 5);
  backed.allocateSlots(req('b', range(0, 5)), 5);
  assert.deepEqual([backed.stateSlot('b'), backed.specBackupSlot('b'), backed.specBackupSlot('nobody')], [1, 6, -1]);
  // the recurrent group first (Qwen3.5's layer 0 is linear attention): blockTable is still the attention pages
  const first = kvOf([HYBRID[1]!, HYBRID[0]!], 13, false);
  first.allocateSlots(req('a', range(0, 5)), 5);
  assert.deepEqual([first.pagedGroup, first.blockTable('a'), first.blockTables('a')], [1, [1, 2], [[0], [1, 2]]]);
});

test('allocation is atomic across groups: pages or state slots short, no group takes anything', () => {
  const two = kvOf(TWO_FULL, 8, false);
  assert.ok(two.allocateSlots(req('a', range(0, 12)), 12) !== null);
  assert.equal(two.numFreeBlocks, 1);
  // group 0's page would fit in the one free page; the other group's would not
  const before = two.pool.freeBlockIds();
  assert.equal(two.allocateSlots(req('b', [7]), 1), null);
  assert.deepEqual(two.pool.freeBlockIds(), before);
  assert.deepEqual(two.blockTables('b'), [[], []]);
  assert.deepEqual(two.requestIds(), ['a']);

  // pages to spare, but the one state slot is a's
  const hybrid = kvOf(HYBRID, 13, false, 1);
  assert.ok(hybrid.allocateSlots(req('a', range(0, 5)), 5) !== null);
  assert.equal(hybrid.allocateSlots(req('b', [7]), 1), null);
  assert.deepEqual([hybrid.numFreeBlocks, hybrid.numFreeStateSlots], [10, 0]);
  assert.deepEqual(hybrid.blockTables('b'), [[], []]);
  // and a slot to spare, but no page: b takes neither
  const short = kvOf(HYBRID, 3, false, 2);
  assert.ok(short.allocateSlots(req('a', range(0, 8)), 8) !== null);
  assert.equal(short.allocateSlots(req('b', [7]), 1), null);
  assert.deepEqual([short.numFreeBlocks, short.numFreeStateSlots, short.requestIds()], [0, 1, ['a']]);
});

test('free returns every page of every group, attention pages position by position from the tail, and the state ' +
  'slot', () => {
  const two = kvOf(TWO_FULL, 13, false);
  const a = req('a', range(0, 10));
  two.allocateSlots(a, 10);
  two.free(a);
  assert.deepEqual(two.pool.freeBlockIds(), [7, 8, 9, 10, 11, 12, 3, 6, 2, 5, 1, 4]);
  assert.deepEqual(two.blockTables('a'), [[], []]);
  assert.equal(two.usage(), 0);

  const dense = new KVCacheManager({ numBlocks: 6, blockSize: 4, enablePrefixCaching: false });
  const c = req('c', range(0, 10));
  dense.allocateSlots(c, 10);
  dense.free(c);
  assert.deepEqual(dense.pool.freeBlockIds(), [4, 5, 3, 2, 1]);

  const hybrid = kvOf(HYBRID, 13, false, 2);
  const b = req('b', range(0, 10));
  hybrid.allocateSlots(b, 10);
  hybrid.allocateSlots(req('c', [1]), 1);
  assert.deepEqual([hybrid.stateSlot('b'), hybrid.numFreeStateSlots], [0, 0]);
  hybrid.free(b);
  assert.deepEqual(hybrid.pool.freeBlockIds(), [5, 6, 7, 8, 9, 10, 11, 12, 3, 2, 1]);
  assert.deepEqual([hybrid.numFreeBlocks, hybrid.numFreeStateSlots, hybrid.stateSlot('b')], [11, 1, -1]);
  assert.deepEqual(hybrid.requestIds(), ['c']);
  // the freed slot is the next one handed out
  hybrid.allocateSlots(req('d', [1]), 1);
  assert.equal(hybrid.stateSlot('d'), 0);
});

test('two full-attention groups: a prefix hit takes each group\'s own cached pages', () => {
  const kv = kvOf(TWO_FULL);
  const a = req('a', range(0, 10));
  assert.deepEqual(runPrompt(kv, a), [1, 2, 3, 4, 5, 6]);
  assert.equal(kv.pool.numCachedBlocks, 4);
  const b = req('b', [...range(0, 10), 50]);
  const hit = kv.getComputedBlocks(b);
  assert.deepEqual(hit, { blockIds: [1, 2], numCachedTokens: 8, groupBlockIds: [[1, 2], [4, 5]] });
  assert.deepEqual(kv.allocateSlots(b, 3, hit), [7, 8]);
  assert.deepEqual(kv.blockTables('b'), [[1, 2, 7], [4, 5, 8]]);
  assert.deepEqual([1, 2, 3, 4, 5, 6].map((i) => kv.pool.block(i).refCount), [2, 2, 1, 2, 2, 1]);
  assert.equal(kv.prefixCacheHits, 8);
  assert.throws(() => kv.allocateSlots(req('c', range(0, 10)), 2, { blockIds: [1], numCachedTokens: 4 }),
    /without groupBlockIds/);
});

test('a prefix hit is only as long as every group\'s: a page gone in one group cuts the hit of all', () => {
  const kv = kvOf(TWO_FULL);
  const a = req('a', range(0, 13));
  runPrompt(kv, a);
  kv.free(a);
  // free queue tail: 4 8, 3 7, 2 6, 1 5 (group 0's page, then group 1's, from the last position)
  assert.deepEqual(kv.pool.freeBlockIds(), [9, 10, 11, 12, 4, 8, 3, 7, 2, 6, 1, 5]);
  assert.deepEqual(kv.getComputedBlocks(req('p', range(0, 13))).groupBlockIds, [[1, 2, 3], [5, 6, 7]]);
  // 8 new pages evict the third page of both groups together
  assert.deepEqual(kv.allocateSlots(req('big', range(500, 516)), 16), [9, 10, 11, 12, 4, 8, 3, 7]);
  assert.deepEqual(kv.getComputedBlocks(req('q', range(0, 13))),
    { blockIds: [1, 2], numCachedTokens: 8, groupBlockIds: [[1, 2], [5, 6]] });
  // group 1 shorter: group 0's hit is cut to it
  kv.pool.uncacheBlock(kv.pool.block(6));
  assert.deepEqual(kv.getComputedBlocks(req('r', range(0, 13))),
    { blockIds: [1], numCachedTokens: 4, groupBlockIds: [[1], [5]] });
  // group 0 shorter: no hit at all, though group 1 still holds its first page
  kv.pool.uncacheBlock(kv.pool.block(1));
  assert.deepEqual(kv.getComputedBlocks(req('s', range(0, 13))),
    { blockIds: [], numCachedTokens: 0, groupBlockIds: [[], []] });
  assert.notEqual(kv.pool.block(5).blockHash, null);
});

test('every group\'s hit is taken before any group takes new pages (taking one may evict another\'s hit)', () => {
  const kv = kvOf(TWO_FULL, 7);
  const a = req('a', range(0, 5));
  runPrompt(kv, a);
  kv.free(a);
  const c = req('c', [99]);
  kv.allocateSlots(c, 1);
  requeue(kv.pool, [2, 4, 1]);
  // free queue: group 1's hit page 3 at the head, then 2 4 1 (1: group 0's hit)
  assert.deepEqual(kv.pool.freeBlockIds(), [3, 2, 4, 1]);
  const b = req('b', range(0, 6));
  const hit = kv.getComputedBlocks(b);
  assert.deepEqual(hit.groupBlockIds, [[1], [3]]);
  assert.deepEqual(kv.allocateSlots(b, 2, hit), [2, 4]);
  assert.deepEqual(kv.blockTables('b'), [[1, 2], [3, 4]]);
  assert.deepEqual([1, 2, 3, 4].map((i) => kv.pool.block(i).refCount), [1, 1, 1, 1]);
  assert.equal(kv.numFreeBlocks, 0);
});

test('a recurrent group without cached-state slots saves no state: a hybrid model never hits', () => {
  const kv = kvOf(HYBRID);
  const a = req('a', range(0, 10));
  assert.deepEqual(runPrompt(kv, a), [1, 2, 3]);
  // the attention pages are registered (for when states are cached too)
  assert.deepEqual([1, 2, 3].map((i) => kv.pool.block(i).blockHash !== null), [true, true, false]);
  const b = req('b', range(0, 10));
  assert.deepEqual(kv.getComputedBlocks(b), { blockIds: [], numCachedTokens: 0, groupBlockIds: [[], []] });
  assert.equal(kv.prefixCacheQueries, 20);
  assert.equal(kv.prefixCacheHits, 0);
  assert.deepEqual(kv.allocateSlots(b, 10), [4, 5, 6]);
  assert.deepEqual(kv.blockTables('b'), [[4, 5, 6], [1]]);
  assert.throws(() => kv.allocateSlots(req('c', range(0, 10)), 2,
    { blockIds: [1], numCachedTokens: 4, groupBlockIds: [[1], [2]] }), /caches states, not pages/);
  assert.equal(kv.saveStateSlot(b, 8), null);
});

test('a recurrent group with cached-state slots: states saved at page ends only, a hit is the longest run of pages ' +
  'whose last page has a state, restored from its slot; reset forgets the states', () => {
  const kv = new KVCacheManager({ numBlocks: 13, blockSize: 4, enablePrefixCaching: true, groups: HYBRID,
    numStateSlots: 3, numCachedStateSlots: 2 });
  assert.deepEqual([kv.cachesStates, kv.numCachedStateSlots, kv.numCachedStates], [true, 2, 0]);
  const a = req('a', range(0, 13));
  runPrompt(kv, a);
  assert.deepEqual([kv.saveStateSlot(a, 6), kv.saveStateSlot(a, 0), kv.saveStateSlot(a, 16)], [null, null, null],
    'not a page end, or past the known tokens');
  assert.deepEqual([kv.saveStateSlot(a, 4), kv.saveStateSlot(a, 4), kv.numCachedStates], [3, null, 1],
    'slots after the 3 running ones; a saved state is not saved twice');
  // pages hit up to 12 (3 pages), the only state at 4: a hit of one page from slot 3, and the 12 pages matched said
  // (the request saves its state there: Scheduler)
  const b = req('b', range(0, 13));
  assert.deepEqual(kv.getComputedBlocks(b),
    { blockIds: [1], numCachedTokens: 4, groupBlockIds: [[1], []], stateSlot: 3, numMatchedTokens: 12 });
  assert.equal(kv.saveStateSlot(a, 12), 4);
  assert.deepEqual(kv.getComputedBlocks(req('c', range(0, 13))).stateSlot, 4, 'the longest wins');
  assert.deepEqual(kv.getComputedBlocks(req('d', range(0, 12))).numCachedTokens, 4, 'never the whole prompt');
  assert.deepEqual(kv.getComputedBlocks(req('e', [9, ...range(1, 13)])).numCachedTokens, 0, 'pages first');
  assert.equal(kv.getComputedBlocks(req('f', range(0, 13))).numMatchedTokens, undefined, 'a state at the match end');
  const computed = kv.getComputedBlocks(b);
  assert.equal(computed.numCachedTokens, 12);
  assert.deepEqual(kv.allocateSlots(b, 1, computed), [5]);
  assert.deepEqual(kv.blockTables('b'), [[1, 2, 3, 5], [1]], 'the hit pages, and its own state slot');
  kv.free(a);
  kv.free(b);
  assert.ok(kv.resetPrefixCache());
  assert.equal(kv.numCachedStates, 0);
});

test('the pool keys its cache by group: one hash in two groups, each page under its own group', () => {
  const pool = new BlockPool(6);
  const [b1, b2] = pool.getNewBlocks(2);
  const key = { blockHash: 'h' as BlockHash, parentHash: null, extraKey: '', tokenIds: [1, 2] };
  assert.ok(pool.cacheBlock(b1!, key, 0));
  assert.ok(pool.cacheBlock(b2!, key, 1));
  assert.equal(pool.cacheBlock(b1!, key, 1), false);
  assert.equal(pool.getCachedBlock(key.blockHash, 0), b1);
  assert.equal(pool.getCachedBlock(key.blockHash, 1), b2);
  assert.equal(pool.getCachedBlock(key.blockHash, 2), null);
  assert.equal(pool.numCachedBlocks, 2);
  pool.freeBlocks([b2!, b1!]);
  assert.deepEqual(pool.getNewBlocks(4).map((b) => b.blockId), [3, 4, 5, 2]);  // evicts group 1's page
  assert.equal(pool.getCachedBlock(key.blockHash, 1), null);
  assert.equal(pool.getCachedBlock(key.blockHash, 0), b1);
  assert.equal(pool.numEvictions, 1);
  pool.uncacheBlock(b1!);
  assert.equal(pool.numCachedBlocks, 0);
});

test('resetPrefixCache drops every group\'s hashes', () => {
  const kv = kvOf(TWO_FULL);
  const a = req('a', range(0, 10));
  runPrompt(kv, a);
  assert.equal(kv.resetPrefixCache(), false);
  kv.free(a);
  assert.equal(kv.pool.numCachedBlocks, 4);
  assert.equal(kv.resetPrefixCache(), true);
  assert.equal(kv.pool.numCachedBlocks, 0);
  assert.deepEqual(kv.getComputedBlocks(req('b', range(0, 10))).groupBlockIds, [[], []]);
});
