// Grammars for the grammar-host tests: one that traps xgrammar's WebAssembly build, one that compiles for long.

import type { StructuredOutputSpec } from '../../src/sampling/structured-output.js';

/** A schema 60 objects deep: xgrammar's WebAssembly build traps on it (some 55 is enough). */
export function trappingSchema(): StructuredOutputSpec {
  let s: Record<string, unknown> = { type: 'string' };
  for (let i = 0; i < 60; i++) s = { type: 'object', properties: { a: s }, required: ['a'] };
  return { type: 'json', schema: JSON.stringify(s) };
}

/**
 * An EBNF grammar whose rules refer to each other in loops: its compile time grows faster than its rules (3,000
 * rules: some 20 s against the tiny test model's 512 tokens, minutes against the demo model's 6,144).
 */
export function slowGrammar(numRules: number): StructuredOutputSpec {
  const rules = ['root ::= r0'];
  for (let i = 0; i < numRules; i++) {
    rules.push(`r${i} ::= [a-z0-9_]{1,8} ("-${i}" | "+" r${Math.min(i + 1, numRules - 1)})* ${i + 1 < numRules ? `r${i + 1}` : '"z"'}`);
  }
  return { type: 'grammar', ebnf: rules.join('\n') };
}

/** Waits, a few ms at a time, until `cond` holds (no bound of its own: the test runner's is the bound). */
export async function until(cond: () => boolean): Promise<void> {
  while (!cond()) await new Promise((r) => setTimeout(r, 5));
}
