// Parsers of option values shared by the commands: a bad value throws commander's InvalidArgumentError, so the
// message names the flag and the value ("option '--seed <n>' argument 'x' is invalid. expected an integer.") and the
// command exits with no stack trace.

import { InvalidArgumentError } from 'commander';

/** Any integer. */
export const int = integerOf(Number.MIN_SAFE_INTEGER, 'expected an integer.');

/** Any finite number. */
export const num = numberOf(false, 'expected a number.');

/** An integer of at least `min` (counts: 1, lengths that may be empty: 0). */
export function atLeast(min: number): (v: string) => number {
  return integerOf(min, min === 1 ? 'expected a positive integer.' : `expected an integer of at least ${min}.`);
}

/** A positive finite number (rates). */
export const positive = numberOf(true, 'expected a positive number.');

function integerOf(min: number, expected: string): (v: string) => number {
  return (v) => {
    const n = Number(v);
    if (v.trim() === '' || !Number.isInteger(n) || n < min) throw new InvalidArgumentError(expected);
    return n;
  };
}

function numberOf(positiveOnly: boolean, expected: string): (v: string) => number {
  return (v) => {
    const n = Number(v);
    if (v.trim() === '' || !Number.isFinite(n) || (positiveOnly && n <= 0)) throw new InvalidArgumentError(expected);
    return n;
  };
}
