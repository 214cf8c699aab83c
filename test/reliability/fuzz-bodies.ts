// Seeded request bodies for the reliability fuzzer: valid bodies of five endpoints, mutated (fields dropped, values
// swapped for wrong types, extremes, long or odd strings, deep nesting). The same seed gives the same bodies.

import { seededRandom as rng } from '../../src/model/random-weights.js';


const PATHS = ['/v1/completions', '/v1/chat/completions', '/v1/responses', '/tokenize', '/v1/embeddings'] as const;

const msg = { role: 'user', content: 'Once upon a time' };
const BASES: Record<(typeof PATHS)[number], Record<string, unknown>> = {
  '/v1/completions': { prompt: 'Once upon a time', max_tokens: 2, temperature: 0.5 },
  '/v1/chat/completions': { messages: [msg], max_tokens: 2 },
  '/v1/responses': { input: 'Once upon a time', max_output_tokens: 2 },
  '/tokenize': { prompt: 'Once upon a time' },
  '/v1/embeddings': { input: 'Once upon a time' },
};

const FIELDS = ['prompt', 'messages', 'input', 'max_tokens', 'max_output_tokens', 'n', 'temperature', 'top_p', 'top_k', 'min_p',
  'stop', 'stop_token_ids', 'bad_words', 'logit_bias', 'allowed_token_ids', 'seed', 'logprobs', 'top_logprobs', 'echo',
  'stream', 'stream_options', 'response_format', 'structured_outputs', 'guided_json', 'guided_regex', 'guided_choice',
  'guided_grammar', 'tools', 'tool_choice', 'chat_template', 'chat_template_kwargs', 'prompt_logprobs', 'min_tokens',
  'repetition_penalty', 'presence_penalty', 'frequency_penalty', 'truncate_prompt_tokens', 'priority', 'text', 'model'];

export function fuzzValue(r: () => number, depth = 0): unknown {
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(r() * xs.length)]!;
  switch (Math.floor(r() * 14)) {
    case 0: return null;
    case 1: return pick([true, false]);
    case 2: return pick([0, 1, 2, -1, -(2 ** 31), 2 ** 53, 1e308, -1e-308, 0.5, 3.7, 1e20]);
    case 3: return pick(['', 'a', 'Once', '\u0000', '\ud800', '\u{1F600}', '<|im_start|>', '{{ x }}', '[a-', 'root ::= "a"', 'null']);
    case 4: return 'x'.repeat(pick([10, 100, 1000, 5000]));
    case 5: return depth > 3 ? [] : Array.from({ length: Math.floor(r() * 4) }, () => fuzzValue(r, depth + 1));
    case 6: return depth > 3 ? {} : Object.fromEntries(Array.from({ length: Math.floor(r() * 3) }, () => [pick(FIELDS), fuzzValue(r, depth + 1)]));
    case 7: {
      const n = pick([50, 200, 300]);
      return JSON.parse('['.repeat(n) + ']'.repeat(n));
    }
    case 8: return { type: pick(['json_object', 'json_schema', 'text', 'regex', 'xml']), json_schema: { name: 'x', schema: fuzzValue(r, depth + 1) } };
    case 9: return pick([{ regex: '[a-z]+' }, { choice: ['a', 'b'] }, { json: { type: 'object' } }, { grammar: 'root ::= "a" | ' }]);
    case 10: return [{ role: pick(['user', 'assistant', 'system', 'tool', 7]), content: fuzzValue(r, depth + 1) }];
    case 11: return Array.from({ length: pick([1, 5, 20]) }, (_, i) => i * pick([1, 1000, -1]));
    case 12: return { [String(Math.floor(r() * 10_000))]: pick([100, -100, 1e9, 'x']) };
    default: return Math.floor(r() * 5);
  }
}

/** Body `i` of seed `seed`: a path, and the body as text (sometimes not JSON, sometimes not an object). */
export function fuzzBody(seed: number, i: number): { path: string; body: string } {
  const r = rng(seed * 1_000_003 + i);
  const path = PATHS[Math.floor(r() * PATHS.length)]!;
  const body: Record<string, unknown> = { ...BASES[path] };
  const numMutations = 1 + Math.floor(r() * 3);
  for (let k = 0; k < numMutations; k++) {
    const field = FIELDS[Math.floor(r() * FIELDS.length)]!;
    if (r() < 0.2) delete body[field];
    else body[field] = fuzzValue(r);
  }
  // keep generation short: the fuzzer is about inputs, not throughput
  for (const k of ['max_tokens', 'max_output_tokens']) {
    if (typeof body[k] === 'number' && (body[k] as number) > 4) body[k] = 4;
    if (body[k] === null) body[k] = 2;
  }
  if (typeof body.n === 'number' && body.n > 4) body.n = 4;
  if (body.max_tokens === undefined && (path === '/v1/completions' || path === '/v1/chat/completions')) body.max_tokens = 2;
  if (body.max_output_tokens === undefined && path === '/v1/responses') body.max_output_tokens = 2;
  let text = JSON.stringify(body);
  const form = r();
  if (form < 0.03) text = text.slice(0, Math.floor(r() * text.length));
  else if (form < 0.05) text = JSON.stringify(fuzzValue(r));
  return { path, body: text };
}
