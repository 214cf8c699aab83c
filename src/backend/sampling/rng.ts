// xoshiro128** (Blackman & Vigna), seeded through splitmix32 so that nearby
// seeds give unrelated streams. 128 bits of state, period 2^128 - 1.

function splitmix32(state: { x: number }): number {
  state.x = (state.x + 0x9e3779b9) | 0;
  let z = state.x;
  z = Math.imul(z ^ (z >>> 16), 0x85ebca6b);
  z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35);
  return (z ^ (z >>> 16)) >>> 0;
}

export class Rng {
  private s0: number;
  private s1: number;
  private s2: number;
  private s3: number;

  /** Any safe integer (negative too); the high and low 32 bits both count. */
  constructor(seed: number) {
    if (!Number.isSafeInteger(seed)) throw new RangeError(`Rng seed must be a safe integer, got ${seed}`);
    const lo = seed >>> 0;
    const hi = Math.floor(seed / 0x100000000) >>> 0;
    const mix = { x: lo ^ Math.imul(hi, 0x27d4eb2d) ^ hi };
    this.s0 = splitmix32(mix);
    this.s1 = splitmix32(mix);
    this.s2 = splitmix32(mix);
    this.s3 = splitmix32(mix);
    if ((this.s0 | this.s1 | this.s2 | this.s3) === 0) this.s0 = 1;
  }

  nextUint32(): number {
    const result = Math.imul(rotl(Math.imul(this.s1, 5), 7), 9) >>> 0;
    const t = this.s1 << 9;
    this.s2 ^= this.s0;
    this.s3 ^= this.s1;
    this.s1 ^= this.s2;
    this.s0 ^= this.s3;
    this.s2 ^= t;
    this.s3 = rotl(this.s3, 11);
    return result;
  }

  /** Uniform in [0, 1) with 53 random bits. */
  nextFloat(): number {
    const hi = this.nextUint32() >>> 5;
    const lo = this.nextUint32() >>> 6;
    return (hi * 67108864 + lo) / 9007199254740992;
  }
}

function rotl(x: number, k: number): number {
  return (x << k) | (x >>> (32 - k));
}

/** A request's own stream when it has a seed, else the engine's shared one. */
export function rngForRequest(seed: number | null, engineRng: Rng): Rng {
  return seed === null ? engineRng : new Rng(seed);
}
