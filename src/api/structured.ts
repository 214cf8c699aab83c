// Structured-output request fields -> the engine's spec, as vLLM reads them: OpenAI's `response_format`
// (json_object, json_schema, structural_tag), vLLM's `structured_outputs` (json, regex, choice, grammar,
// structural_tag) and its older `guided_json` / `guided_regex` / `guided_choice` / `guided_grammar`. A spec that
// does not compile is a 400 here, before any token is generated.

import type { StructuredOutputSpec } from '../sampling/structured-output.js';
import { ApiError, badRequest, unavailable } from './errors.js';
import { checkGrammarLimits, type GrammarLimits } from './grammar-limits.js';
import { isObject, type Body } from './schemas.js';
import { PoolClosedError, PoolTimeoutError, type WorkerPool } from './worker-pool.js';

/** How a request's structured output is checked: limits first, then a compile in the worker pool. */
export interface GrammarCheck {
  pool: WorkerPool;
  limits: GrammarLimits;
  /** A compile longer than this is a 400 (--grammar-compile-timeout). */
  compileTimeoutMs: number;
}

function jsonSpec(v: unknown, param: string): StructuredOutputSpec {
  if (typeof v === 'string') {
    try {
      if (!isObject(JSON.parse(v))) throw new Error();
    } catch {
      throw badRequest(`\`${param}\` must be a JSON schema (an object, or a string holding one).`, param);
    }
    return { type: 'json', schema: v };
  }
  if (!isObject(v)) throw badRequest(`\`${param}\` must be a JSON schema (an object, or a string holding one).`, param);
  return { type: 'json', schema: JSON.stringify(v) };
}

function choiceSpec(v: unknown, param: string): StructuredOutputSpec {
  if (!Array.isArray(v) || v.length === 0 || !v.every((c) => typeof c === 'string' && c !== '')) {
    throw badRequest(`\`${param}\` must be a non-empty list of non-empty strings.`, param);
  }
  return { type: 'choice', choices: v };
}

/**
 * A structural tag (free text, and where a trigger appears, a tag whose content follows a schema), in either of
 * vLLM's forms: {"structures": [{"begin", "schema", "end"}], "triggers": [...]} (each structure's JSON schema
 * between its begin and end, once its trigger is written), or xgrammar's own {"format": {...}}. In
 * `structured_outputs` it may come as a string holding the object, as vLLM takes it.
 */
function structuralTagSpec(v: unknown, param: string): StructuredOutputSpec {
  if (typeof v === 'string') {
    try {
      v = JSON.parse(v);
    } catch {
      v = undefined;
    }
  }
  if (!isObject(v)) throw badRequest(`\`${param}\` must be a structural tag object (or a string holding one).`, param);
  if (v.format !== undefined) {
    if (!isObject(v.format)) throw badRequest(`\`${param}.format\` must be an object.`, `${param}.format`);
    return { type: 'structural_tag', tag: JSON.stringify({ type: 'structural_tag', format: v.format }) };
  }
  const { structures, triggers } = v;
  if (!Array.isArray(structures) || structures.length === 0) {
    throw badRequest(`\`${param}.structures\` must be a non-empty list of {"begin", "schema", "end"} (or give \`format\`).`, `${param}.structures`);
  }
  const tags = structures.map((t: unknown, i) => {
    const at = `${param}.structures[${i}]`;
    if (!isObject(t) || typeof t.begin !== 'string' || t.begin === '' || typeof t.end !== 'string' || !isObject(t.schema)) {
      throw badRequest(`\`${at}\` must be {"begin": string, "schema": object, "end": string}.`, at);
    }
    return { type: 'tag', begin: t.begin, content: { type: 'json_schema', json_schema: t.schema }, end: t.end };
  });
  if (!Array.isArray(triggers) || triggers.length === 0 || !triggers.every((t) => typeof t === 'string' && t !== '')) {
    throw badRequest(`\`${param}.triggers\` must be a non-empty list of non-empty strings.`, `${param}.triggers`);
  }
  const untriggered = tags.findIndex((t) => !triggers.some((g: string) => t.begin.startsWith(g)));
  if (untriggered >= 0) {
    throw badRequest(`\`${param}.structures[${untriggered}].begin\` must start with one of \`triggers\`.`, `${param}.structures[${untriggered}].begin`);
  }
  return { type: 'structural_tag', tag: JSON.stringify({ type: 'structural_tag', format: { type: 'triggered_tags', triggers, tags } }) };
}

function fromResponseFormat(v: unknown): StructuredOutputSpec | null {
  if (!isObject(v)) throw badRequest('`response_format` must be an object.', 'response_format');
  if (v.type === 'text') return null;
  if (v.type === 'json_object') return { type: 'json', schema: '{"type": "object"}' };
  if (v.type === 'json_schema') {
    const js = v.json_schema;
    if (!isObject(js) || js.schema === undefined) {
      throw badRequest('`response_format.json_schema.schema` is required for "json_schema".', 'response_format.json_schema.schema');
    }
    return jsonSpec(js.schema, 'response_format.json_schema.schema');
  }
  if (v.type === 'structural_tag') return structuralTagSpec(v, 'response_format');
  throw badRequest('`response_format.type` must be "text", "json_object", "json_schema" or "structural_tag".', 'response_format.type');
}

function textSpec(v: unknown, param: string, make: (s: string) => StructuredOutputSpec): StructuredOutputSpec {
  if (typeof v !== 'string' || v === '') throw badRequest(`\`${param}\` must be a non-empty string.`, param);
  return make(v);
}

const regexSpec = (v: unknown, param: string) => textSpec(v, param, (pattern) => ({ type: 'regex', pattern }));
const grammarSpec = (v: unknown, param: string) => textSpec(v, param, (ebnf) => ({ type: 'grammar', ebnf }));

function fromStructuredOutputs(v: unknown): [string, StructuredOutputSpec] | null {
  if (!isObject(v)) throw badRequest('`structured_outputs` must be an object.', 'structured_outputs');
  const given = (k: string) => v[k] !== undefined && v[k] !== null;
  const kinds = { json: jsonSpec, regex: regexSpec, choice: choiceSpec, grammar: grammarSpec, structural_tag: structuralTagSpec };
  const specs = Object.entries(kinds).filter(([k]) => given(k))
    .map(([k, make]): [string, StructuredOutputSpec] => [`structured_outputs.${k}`, make(v[k], `structured_outputs.${k}`)]);
  if (specs.length > 1) {
    throw badRequest('`structured_outputs` takes one of `json`, `regex`, `choice`, `grammar` or `structural_tag`.', 'structured_outputs');
  }
  return specs[0] ?? null;
}

/** The request's structured-output spec (null: free text); 400 on a malformed or uncompilable one. */
export async function structuredOutputFromBody(b: Body, g: GrammarCheck): Promise<StructuredOutputSpec | null> {
  const given: [string, StructuredOutputSpec | null][] = [];
  if (b.response_format !== undefined && b.response_format !== null) given.push(['response_format', fromResponseFormat(b.response_format)]);
  if (b.structured_outputs !== undefined && b.structured_outputs !== null) {
    given.push(fromStructuredOutputs(b.structured_outputs) ?? ['structured_outputs', null]);
  }
  if (b.guided_json !== undefined && b.guided_json !== null) given.push(['guided_json', jsonSpec(b.guided_json, 'guided_json')]);
  if (b.guided_choice !== undefined && b.guided_choice !== null) given.push(['guided_choice', choiceSpec(b.guided_choice, 'guided_choice')]);
  if (b.guided_regex !== undefined && b.guided_regex !== null) given.push(['guided_regex', regexSpec(b.guided_regex, 'guided_regex')]);
  if (b.guided_grammar !== undefined && b.guided_grammar !== null) given.push(['guided_grammar', grammarSpec(b.guided_grammar, 'guided_grammar')]);
  const specs = given.filter(([, s]) => s !== null);
  if (specs.length > 1) {
    throw badRequest(`Only one structured-output constraint per request; got ${specs.map(([k]) => `\`${k}\``).join(' and ')}.`, specs[1]![0]);
  }
  if (specs.length === 0) return null;
  const [param, spec] = specs[0]!;
  return checkedSpec(spec!, param, g);
}

/**
 * The spec, once it is within the limits and compiles in the worker pool within the time limit; else a 400 naming
 * `param`. A compiler that traps or dies is a 500 that says nothing of what it held.
 */
export async function checkedSpec(spec: StructuredOutputSpec, param: string, g: GrammarCheck): Promise<StructuredOutputSpec> {
  checkGrammarLimits(spec, param, g.limits);
  let result;
  try {
    result = await g.pool.run({ kind: 'grammar', spec }, g.compileTimeoutMs);
  } catch (e) {
    if (e instanceof PoolTimeoutError) {
      throw badRequest(`\`${param}\` did not compile to a grammar within the limit of ${g.compileTimeoutMs / 1000} s `
        + '(--grammar-compile-timeout); simplify it.', param, 'structured_output_timeout');
    }
    if (e instanceof PoolClosedError) throw unavailable('The server is shutting down.');
    throw grammarServerError();
  }
  if (result.ok) return spec;
  if (result.reason === null) throw grammarServerError();
  throw badRequest(`\`${param}\` does not compile to a grammar: ${result.reason}`, param);
}

function grammarServerError(): ApiError {
  return new ApiError(500, 'The grammar compiler failed on this request (its worker was replaced; other requests are '
    + 'unaffected).', 'server_error', null, 'grammar_compiler_failed');
}
