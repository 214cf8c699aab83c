// Limits a structured output must be within before it goes to the compiler, checked here in linear time without
// recursion (a deep schema must not overflow our stack, nor xgrammar's: its WebAssembly build traps on a JSON schema
// some 55 objects deep, and its compile time grows faster than the number of rules). Each is a 400 naming the field
// and the limit.

import { badRequest } from './errors.js';
import type { StructuredOutputSpec } from '../sampling/structured-output.js';

export interface GrammarLimits {
  /** JSON nesting levels of a schema or structural tag (objects and lists); --max-json-schema-depth. */
  maxJsonSchemaDepth: number;
  /** Characters of a schema, grammar, regex, structural tag or of all choices together. */
  maxGrammarChars: number;
  /** Rules of an EBNF grammar; --max-grammar-rules. */
  maxGrammarRules: number;
  /** Entries of a schema's `enum`, or choices of a choice list. */
  maxEnumEntries: number;
  /** Nesting of parentheses in a regex or an EBNF grammar. */
  maxGroupDepth: number;
}

export const DEFAULT_GRAMMAR_LIMITS: GrammarLimits = {
  maxJsonSchemaDepth: 64,
  maxGrammarChars: 128 * 1024,
  maxGrammarRules: 1000,
  maxEnumEntries: 1024,
  maxGroupDepth: 64,
};

/** Depth of nesting, nodes and the longest `enum` of a parsed JSON value, without recursion. */
export function jsonShape(value: unknown): { depth: number; maxEnum: number } {
  let depth = 0;
  let maxEnum = 0;
  const stack: [unknown, number][] = [[value, 1]];
  while (stack.length > 0) {
    const [v, d] = stack.pop()!;
    if (v === null || typeof v !== 'object') continue;
    depth = Math.max(depth, d);
    if (Array.isArray(v)) {
      for (const x of v) stack.push([x, d + 1]);
    } else {
      for (const [k, x] of Object.entries(v)) {
        if (k === 'enum' && Array.isArray(x)) maxEnum = Math.max(maxEnum, x.length);
        stack.push([x, d + 1]);
      }
    }
  }
  return { depth, maxEnum };
}

/** Whether a parsed JSON value nests at most `maxDepth` levels (without recursion; stops at the first deeper one). */
export function jsonShapeWithin(value: unknown, maxDepth: number): boolean {
  const stack: [unknown, number][] = [[value, 1]];
  while (stack.length > 0) {
    const [v, d] = stack.pop()!;
    if (v === null || typeof v !== 'object') continue;
    if (d > maxDepth) return false;
    for (const x of Array.isArray(v) ? v : Object.values(v)) if (x !== null && typeof x === 'object') stack.push([x, d + 1]);
  }
  return true;
}

/** Nesting of `(` outside quoted strings, character classes and escapes (a regex, or EBNF). */
function groupDepth(text: string): number {
  let depth = 0;
  let max = 0;
  let quote: string | null = null;
  let inClass = false;
  for (let i = 0; i < text.length; i++) {
    const c = text[i]!;
    if (c === '\\') {
      i++;
      continue;
    }
    if (quote !== null) {
      if (c === quote) quote = null;
    } else if (inClass) {
      if (c === ']') inClass = false;
    } else if (c === '[') {
      inClass = true;
    } else if (c === '(') {
      max = Math.max(max, ++depth);
    } else if (c === ')') {
      depth = Math.max(0, depth - 1);
    }
  }
  return max;
}

const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

/** Refuses a spec beyond the limits, or with text no compiler should see (an unpaired surrogate). */
export function checkGrammarLimits(spec: StructuredOutputSpec, param: string, l: GrammarLimits): void {
  const tooBig = (clause: string, flag?: string) =>
    badRequest(`\`${param}\` ${clause}${flag ? ` (${flag})` : ''}.`, param, 'structured_output_too_complex');
  const texts = spec.type === 'json' ? [spec.schema] : spec.type === 'choice' ? spec.choices
    : spec.type === 'regex' ? [spec.pattern] : spec.type === 'grammar' ? [spec.ebnf] : [spec.tag];
  const chars = texts.reduce((a, t) => a + t.length, 0);
  if (chars > l.maxGrammarChars) throw tooBig(`has ${chars} characters; at most ${l.maxGrammarChars} are allowed`);
  if (texts.some((t) => LONE_SURROGATE.test(t))) {
    throw badRequest(`\`${param}\` contains an unpaired UTF-16 surrogate (such as "\\ud800"), which is not a character.`, param);
  }
  switch (spec.type) {
    case 'json':
    case 'structural_tag': {
      const shape = jsonShape(JSON.parse(spec.type === 'json' ? spec.schema : spec.tag));
      if (shape.depth > l.maxJsonSchemaDepth) throw tooBig(`nests objects and lists ${shape.depth} levels deep; at most ${l.maxJsonSchemaDepth} are allowed`, '--max-json-schema-depth');
      if (shape.maxEnum > l.maxEnumEntries) throw tooBig(`has an \`enum\` of ${shape.maxEnum} entries; at most ${l.maxEnumEntries} are allowed`);
      break;
    }
    case 'choice':
      if (spec.choices.length > l.maxEnumEntries) throw tooBig(`has ${spec.choices.length} choices; at most ${l.maxEnumEntries} are allowed`);
      break;
    case 'regex':
    case 'grammar': {
      const text = spec.type === 'regex' ? spec.pattern : spec.ebnf;
      const depth = groupDepth(text);
      if (depth > l.maxGroupDepth) throw tooBig(`nests groups ${depth} levels deep; at most ${l.maxGroupDepth} are allowed`);
      if (spec.type === 'grammar') {
        const rules = text.match(/::=/g)?.length ?? 0;
        if (rules > l.maxGrammarRules) throw tooBig(`has ${rules} rules; at most ${l.maxGrammarRules} are allowed`, '--max-grammar-rules');
      }
      break;
    }
  }
}
