// Llama 3 JSON tool calls (--tool-call-parser llama3_json): whole outputs as vLLM parses them, and the stream
// parser, which must agree for any cut of the output into deltas.

import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { extractLlama3ToolCalls, Llama3ToolCallStreamParser, PYTHON_TAG } from '../../src/api/llama3-tool-parser.js';

describe('llama3_json tool calls', () => {
  it('reads one call, or several separated by ;, with "parameters" or "arguments", behind <|python_tag|> or not', () => {
    assert.deepEqual(extractLlama3ToolCalls('{"name": "get_weather", "parameters": {"city": "Oslo"}}'),
      { content: null, calls: [{ name: 'get_weather', arguments: '{"city":"Oslo"}' }] });
    assert.deepEqual(extractLlama3ToolCalls(`${PYTHON_TAG}{"name": "a", "arguments": {"s": "x; {y}"}}; {"name": "b", "parameters": {}}`),
      { content: null, calls: [{ name: 'a', arguments: '{"s":"x; {y}"}' }, { name: 'b', arguments: '{}' }] });
  });

  it('leaves anything else as content: prose, or a call list that does not parse', () => {
    for (const text of ['The weather is fine.', ' {"name": "a", "parameters": {}}', '{"name": "a", "parameters": {', '{"nom": "a"}', '{"name": "a"} trailing']) {
      assert.deepEqual(extractLlama3ToolCalls(text), { content: text, calls: [] }, text);
    }
  });

  it('streams prose at once and holds a call list to the end; the same as the whole parse for any cut', () => {
    const p = new Llama3ToolCallStreamParser();
    assert.deepEqual(p.push('<|py'), { content: '', calls: [] });
    assert.deepEqual(p.push('x'), { content: '<|pyx', calls: [] });
    assert.deepEqual(p.push(' more'), { content: ' more', calls: [] });
    const outputs = ['Plain words.', '{"name": "f", "parameters": {"q": "a;b"}}', `${PYTHON_TAG}{"name": "f", "arguments": {}}; {"name": "g", "parameters": {"n": 1}}`,
      '{"name": "f", "parameters": {', '<|python', '', '<'];
    fc.assert(fc.property(fc.constantFrom(...outputs), fc.array(fc.nat(), { maxLength: 6 }), (text, cuts) => {
      const at = [...new Set(cuts.map((c) => c % (text.length + 1)))].sort((a, b) => a - b);
      const parts = [0, ...at].map((from, i) => text.slice(from, [...at, text.length][i]));
      const s = new Llama3ToolCallStreamParser();
      const all = [...parts.map((x) => s.push(x)), s.finish()];
      const whole = extractLlama3ToolCalls(text);
      assert.equal(all.map((d) => d.content).join(''), whole.content ?? '');
      assert.deepEqual(all.flatMap((d) => d.calls), whole.calls);
      assert.equal(s.callCount, whole.calls.length);
    }), { numRuns: 300 });
  });
});
