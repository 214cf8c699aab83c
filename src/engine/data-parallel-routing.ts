// Where a data-parallel engine sends a new request (data-parallel-client.ts): the pure part, the rule and the
// memory of which replica holds which prompt prefix, kept apart from the worker threads so that it can be tested
// request by request.
//
// The rule (pickReplica):
// - The least-loaded replica: fewest requests in flight (running + waiting, counted by the client at submit and
//   finish, so exact and immediate, not the worker's gauges that lag by up to a stats interval); among equals, the
//   fewest tokens promised (prompt + max_tokens of those requests), so that a burst submitted at once (the offline
//   W1: 256 requests of 100 to 1,024 tokens each way) splits the work evenly, not only the count; then the lowest
//   index.
// - Prefix affinity wins over that when the replica that last served the request's longest remembered prefix is
//   loaded at most AFFINITY_SLACK requests more than the least-loaded one. Its prefix cache holds those pages: the
//   prompt's prefill there skips them (a 4k-token conversation history is a whole prefill saved), while one more
//   request in a batch of many costs a GPU little (decode reads the weights once a step whatever the batch). Beyond
//   the slack, balance wins: the request goes to the least-loaded replica, which becomes the prefix's remembered
//   owner, so a hot prefix (one system prompt for every request) ends up cached on every replica, each within the
//   slack of the others, instead of piling onto one GPU while another idles.
//
// Prefixes are chained hashes of the prompt's full KV blocks (the engine's block size; a partial last block is
// never cached, so it is never hashed), salted by the request's cache salt as the engine's prefix cache is. They are
// a routing hint, not a cache key: a collision sends a request to a replica without its prefix, nothing worse, so a
// fast 53-bit hash does and SHA-256 is not needed. Remembered sparsely, looked up densely: a served prompt records
// its prefixes of 1, 2, 4, 8, ... blocks and of all its full blocks (a few entries a request, not one a block), and
// a new prompt looks up every one of its prefix lengths, longest first, so the next turn of a conversation (its
// history, then more) finds the previous turn's whole prompt, and prompts that share only a system prompt find
// that. The memory is a bounded LRU map.

/** Requests a replica may carry beyond the least-loaded one and still get a request for its cached prefix. */
export const AFFINITY_SLACK = 4;
/** Prefixes remembered (a few a request: the powers of two up to its length, and its length). */
export const AFFINITY_CAPACITY = 65536;

/** What the client counts of one replica. */
export interface ReplicaLoad {
  /** Requests submitted to it and not finished or aborted (running + waiting). */
  numRequests: number;
  /** Their prompt tokens plus max_tokens. */
  numTokens: number;
}

/** The least-loaded replica: fewest requests, then fewest tokens, then the lowest index. */
export function leastLoaded(loads: readonly ReplicaLoad[]): number {
  let best = 0;
  for (let i = 1; i < loads.length; i++) {
    const a = loads[i]!;
    const b = loads[best]!;
    if (a.numRequests < b.numRequests || (a.numRequests === b.numRequests && a.numTokens < b.numTokens)) best = i;
  }
  return best;
}

/** The replica for a request whose prefix `affinity` last served (null: none remembered). */
export function pickReplica(loads: readonly ReplicaLoad[], affinity: number | null, slack = AFFINITY_SLACK): number {
  const least = leastLoaded(loads);
  if (affinity === null || affinity >= loads.length) return least;
  return loads[affinity]!.numRequests - loads[least]!.numRequests <= slack ? affinity : least;
}

/** 32-bit mix of one value into a lane (murmur3's multiply-rotate). */
function mix(h: number, v: number, m: number): number {
  let k = Math.imul(v, m);
  k = (k << 15) | (k >>> 17);
  h ^= Math.imul(k, 0x1b873593);
  h = (h << 13) | (h >>> 19);
  return (Math.imul(h, 5) + 0xe6546b64) | 0;
}

/** Final avalanche of a lane (murmur3's fmix32). */
function fmix(h: number): number {
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  return (h ^ (h >>> 16)) >>> 0;
}

/**
 * The chained hash of each full block prefix of `tokens`: [k] covers blocks 0..k (the first (k + 1) * blockSize
 * tokens) and the salt. Numbers below 2^53, usable as Map keys.
 */
export function prefixBlockHashes(tokens: readonly number[], blockSize: number, salt: string | null): number[] {
  let a = 0x9747b28c;
  let b = 0x2d2816fe;
  if (salt !== null) {
    for (let i = 0; i < salt.length; i++) {
      a = mix(a, salt.charCodeAt(i), 0xcc9e2d51);
      b = mix(b, salt.charCodeAt(i), 0x1b873593);
    }
  }
  const numBlocks = Math.floor(tokens.length / blockSize);
  const out = new Array<number>(numBlocks);
  for (let k = 0; k < numBlocks; k++) {
    for (let t = k * blockSize; t < (k + 1) * blockSize; t++) {
      a = mix(a, tokens[t]!, 0xcc9e2d51);
      b = mix(b, tokens[t]! ^ 0x5bd1e995, 0x85ebca6b);
    }
    // the chain goes on from the unfinished lanes; the block's key is their avalanche, 21 + 32 bits
    out[k] = (fmix(a ^ (k + 1)) >>> 11) * 2 ** 32 + fmix(b ^ Math.imul(k + 1, 0x27d4eb2d));
  }
  return out;
}

/** Which replica last served each remembered prefix (a bounded LRU map). */
export class PrefixAffinity {
  private readonly owners = new Map<number, number>();

  constructor(private readonly capacity = AFFINITY_CAPACITY) {}

  get size(): number {
    return this.owners.size;
  }

  /** The longest remembered prefix among `hashes` (prefixBlockHashes): its replica and length in blocks, or null. */
  lookup(hashes: readonly number[]): { replica: number; numBlocks: number } | null {
    for (let k = hashes.length - 1; k >= 0; k--) {
      const replica = this.owners.get(hashes[k]!);
      if (replica === undefined) continue;
      this.owners.delete(hashes[k]!);
      this.owners.set(hashes[k]!, replica);  // most recently used
      return { replica, numBlocks: k + 1 };
    }
    return null;
  }

  /** `replica` now serves these prefixes: remembers those of 1, 2, 4, ... blocks and the whole run. */
  record(hashes: readonly number[], replica: number): void {
    const n = hashes.length;
    for (let len = 1; len <= n; len *= 2) this.remember(hashes[len - 1]!, replica);
    if (n > 0) this.remember(hashes[n - 1]!, replica);
  }

  /** Forgets every prefix (a replica's cache is gone). */
  clear(): void {
    this.owners.clear();
  }

  private remember(hash: number, replica: number): void {
    this.owners.delete(hash);
    this.owners.set(hash, replica);
    if (this.owners.size > this.capacity) this.owners.delete(this.owners.keys().next().value!);
  }
}
