// The data-parallel router's pure part (src/engine/data-parallel-routing.ts): least load by requests then tokens,
// prefix affinity within the slack, chained block hashes, and the bounded memory of prefixes.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { AFFINITY_SLACK, leastLoaded, pickReplica, prefixBlockHashes, PrefixAffinity } from '../../src/engine/data-parallel-routing.js';

const load = (numRequests: number, numTokens = 0) => ({ numRequests, numTokens });

test('least loaded: fewest requests, then fewest tokens promised, then the lowest index', () => {
  assert.equal(leastLoaded([load(3), load(1), load(2)]), 1);
  assert.equal(leastLoaded([load(2, 900), load(2, 300), load(3, 0)]), 1);
  assert.equal(leastLoaded([load(1, 5), load(1, 5)]), 0);
});

test('affinity wins while its replica is within the slack of the least loaded; beyond it, the least loaded', () => {
  assert.equal(pickReplica([load(0), load(0)], null), 0);
  assert.equal(pickReplica([load(0), load(AFFINITY_SLACK)], 1), 1, 'at the slack: the replica with the prefix');
  assert.equal(pickReplica([load(0), load(AFFINITY_SLACK + 1)], 1), 0, 'beyond it: the least loaded');
  assert.equal(pickReplica([load(2), load(2), load(0)], 1, 1), 2);
  assert.equal(pickReplica([load(2), load(2), load(1)], 1, 1), 1);
});

test('block hashes: full blocks only, chained (a block\'s hash covers every block before it), salted', () => {
  const a = Array.from({ length: 50 }, (_, i) => i);
  const h = prefixBlockHashes(a, 16, null);
  assert.equal(h.length, 3, '50 tokens hold 3 full blocks of 16');
  assert.deepEqual(prefixBlockHashes(a.slice(0, 48), 16, null), h, 'the partial last block is not hashed');
  assert.deepEqual(prefixBlockHashes([...a.slice(0, 32), 999, 998], 16, null).slice(0, 2), h.slice(0, 2));
  const b = [7, ...a.slice(1)];
  const hb = prefixBlockHashes(b, 16, null);
  assert.ok(hb.every((x, k) => x !== h[k]), 'a different first block changes every later hash');
  const salted = prefixBlockHashes(a, 16, 'tenant-1');
  assert.ok(salted.every((x, k) => x !== h[k]), 'a cache salt gives other hashes, as it gives other cache pages');
  assert.ok(h.every((x) => Number.isSafeInteger(x) && x >= 0));
  assert.equal(new Set(h).size, 3);
});

test('the memory finds the longest remembered prefix; a served prompt is remembered sparsely', () => {
  const m = new PrefixAffinity();
  const tokens = Array.from({ length: 16 * 11 }, (_, i) => (i * 7) % 97);
  const h = prefixBlockHashes(tokens, 16, null);
  m.record(h, 1);
  assert.equal(m.size, 5, 'prefixes of 1, 2, 4, 8 blocks and the whole 11');
  // the next turn of the conversation: the whole previous prompt and more
  const next = prefixBlockHashes([...tokens, ...Array.from({ length: 40 }, (_, i) => i)], 16, null);
  assert.deepEqual(m.lookup(next), { replica: 1, numBlocks: 11 });
  // a prompt sharing 5 blocks finds the 4-block prefix
  const other = prefixBlockHashes([...tokens.slice(0, 16 * 5), ...Array.from({ length: 64 }, () => 3)], 16, null);
  assert.deepEqual(m.lookup(other), { replica: 1, numBlocks: 4 });
  assert.equal(m.lookup(prefixBlockHashes(Array.from({ length: 64 }, () => 5), 16, null)), null);
  m.record(other, 0);
  assert.deepEqual(m.lookup(other), { replica: 0, numBlocks: 9 }, 'the replica that last served it');
  assert.deepEqual(m.lookup(h.slice(0, 2)), { replica: 0, numBlocks: 2 }, 'shared short prefixes moved with it');
});

test('the memory is bounded: the least recently used prefixes go first', () => {
  const m = new PrefixAffinity(4);
  const prompts = [1, 2, 3].map((v) => prefixBlockHashes(Array.from({ length: 16 }, () => v), 16, null));
  m.record(prompts[0]!, 0);
  m.record(prompts[1]!, 1);
  assert.equal(m.lookup(prompts[0]!)?.replica, 0);  // used: now the most recent
  m.record(prompts[2]!, 1);
  m.record(prefixBlockHashes(Array.from({ length: 16 }, () => 4), 16, null), 1);
  m.record(prefixBlockHashes(Array.from({ length: 16 }, () => 5), 16, null), 1);
  assert.equal(m.size, 4);
  assert.equal(m.lookup(prompts[1]!), null, 'the least recently used went');
  assert.equal(m.lookup(prompts[0]!)?.replica, 0);
});
