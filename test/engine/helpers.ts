/**
 * `count` prompts of token ids below 400 from a fixed LCG: each its own 1..maxOwnLen tokens, every
 * `sharedEvery`-th led by the same 40 tokens (prefix-cache hits).
 */
export function sharedPrefixPrompts(seed: number, count: number, maxOwnLen: number, sharedEvery: number): number[][] {
  let x = seed;
  const next = () => (x = (x * 1103515245 + 12345) % 2147483648);
  const shared = Array.from({ length: 40 }, () => next() % 400);
  const prompts: number[][] = [];
  for (let i = 0; i < count; i++) {
    const own = Array.from({ length: 1 + (next() % maxOwnLen) }, () => next() % 400);
    prompts.push(i % sharedEvery === 0 ? [...shared, ...own] : own);
  }
  return prompts;
}
