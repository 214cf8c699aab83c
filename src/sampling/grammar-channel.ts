// The shared memory between the engine thread and a grammar host (grammar-host.ts): one channel per matcher, one
// doorbell per host. The engine's sampler calls a TokenConstraint synchronously, so the calls cannot be messages:
// accept() writes the token into the channel's ring and rings the host's doorbell without waiting; the host accepts
// it and writes the next step's mask into the channel; maskLogits() reads that mask once the host has caught up,
// which it has almost always done by then (the step's forward pass ran in between). Every wait is bounded: a host
// that is dead (it says so in its doorbell) or past the bound fails the constraint, never the engine.

import type { TokenConstraint } from './structured-output.js';

/** Doorbell words: the engine's ring count (the host waits on it), and the host's dead flag. */
export const BELL_RING = 0;
export const BELL_DEAD = 1;
export const BELL_WORDS = 2;

/** Channel words: tokens the engine sent, tokens the host has taken (and filled the mask after), then the ring and the mask. */
export const CH_SENT = 0;
export const CH_DONE = 1;
const CH_HEADER = 2;
/** Tokens the engine may send ahead of the host (several per step: speculative tokens). */
export const CH_RING = 64;

/** Int32 words of a channel for a vocabulary of `vocabSize` (its mask: one bit a token). */
export function channelWords(vocabSize: number): number {
  return CH_HEADER + CH_RING + Math.ceil(vocabSize / 32);
}

export function newChannel(vocabSize: number): Int32Array {
  return new Int32Array(new SharedArrayBuffer(channelWords(vocabSize) * 4));
}

export function newDoorbell(): Int32Array {
  return new Int32Array(new SharedArrayBuffer(BELL_WORDS * 4));
}

/** The channel's mask words (bit b of word w: token 32w + b allowed). */
export function channelMask(ch: Int32Array): Int32Array {
  return ch.subarray(CH_HEADER + CH_RING);
}

/** Host side: the token at position `i` of what the engine sent. */
export function channelToken(ch: Int32Array, i: number): number {
  return ch[CH_HEADER + (i % CH_RING)]!;
}

/** Engine side of a matcher that lives in a grammar host. */
export class HostedConstraint implements TokenConstraint {
  private sent = 0;
  private failed: string | null = null;
  private released = false;

  /**
   * `onStuck`: the host did not answer within `waitMs` (it is ended, with every matcher it holds). `onRelease`: the
   * matcher is no longer needed (the host frees it).
   */
  constructor(private readonly ch: Int32Array, private readonly bell: Int32Array, private readonly waitMs: number,
    private readonly onStuck: () => void, private readonly onRelease: () => void) {}

  maskLogits(row: Float32Array, vocab: number): void {
    if (!this.caughtUp(0)) return;
    const words = channelMask(this.ch);
    const n = Math.min(words.length * 32, vocab);
    for (let w = 0; w * 32 < n; w++) {
      const bits = words[w]!;
      if (bits === -1) continue;
      // most words of a large vocabulary allow nothing (a JSON grammar allows a few hundred of 151k tokens)
      if (bits === 0) row.fill(-Infinity, w * 32, Math.min(w * 32 + 32, n));
      else for (let b = 0; b < 32 && w * 32 + b < n; b++) if (((bits >>> b) & 1) === 0) row[w * 32 + b] = -Infinity;
    }
  }

  accept(tokenId: number): void {
    if (!this.caughtUp(CH_RING - 1)) return;
    this.ch[CH_HEADER + (this.sent % CH_RING)] = tokenId;
    Atomics.store(this.ch, CH_SENT, ++this.sent);
    Atomics.add(this.bell, BELL_RING, 1);
    Atomics.notify(this.bell, BELL_RING);
  }

  failure(): string | null {
    if (this.failed === null && Atomics.load(this.bell, BELL_DEAD) !== 0) this.fail(HOST_FAILED);
    return this.failed;
  }

  /** The host is gone (a trap, a crash, shutdown): the request fails with `why`. */
  fail(why: string): void {
    this.failed ??= why;
  }

  dispose(): void {
    if (this.released) return;
    this.released = true;
    this.onRelease();
  }

  /** Waits (bounded) until the host is at most `behind` tokens behind; false when the constraint has failed. */
  private caughtUp(behind: number): boolean {
    if (this.failure() !== null) return false;
    const deadline = performance.now() + this.waitMs;
    for (;;) {
      const done = Atomics.load(this.ch, CH_DONE);
      if (this.sent - done <= behind) return true;
      if (this.failure() !== null) return false;
      const left = deadline - performance.now();
      if (left <= 0) {
        this.fail(HOST_FAILED);
        this.onStuck();
        return false;
      }
      // a host that traps sets its dead flag and wakes its channels; slices keep the flag read even if a wake is missed
      Atomics.wait(this.ch, CH_DONE, done, Math.min(left, 50));
    }
  }
}

/** What a request learns when its matcher's host failed: nothing of the host's memory. */
export const HOST_FAILED = 'the structured output\'s grammar matcher failed (its worker was replaced; other requests are unaffected)';
