// Mistral tool calls (--tool-call-parser mistral): whole outputs as vLLM's parser reads them (the JSON list after
// [TOOL_CALLS], and the v11 tokenizers' name[ARGS]{...} per call), 9-character ids, and the stream parser, which
// must agree with the whole parse for any cut of the output into deltas.

import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { extractMistralToolCalls, MISTRAL_TOOL_CALLS, MistralToolCallStreamParser } from '../../src/api/mistral-tool-parser.js';
import type { ParsedToolCall } from '../../src/api/tool-parser.js';
import { toolCallJson } from '../../src/api/tools.js';

const T = MISTRAL_TOOL_CALLS;
const named = (calls: ParsedToolCall[]) => calls.map(({ name, arguments: a }) => ({ name, arguments: a }));

describe('mistral tool calls', () => {
  it('reads the JSON list after [TOOL_CALLS], with the content before it', () => {
    const e = extractMistralToolCalls(`${T}[{"name": "get_weather", "arguments": {"city": "Oslo"}}, {"name": "b", "arguments": "{\\"n\\": 1}"}]`);
    assert.equal(e.content, null);
    assert.deepEqual(named(e.calls), [{ name: 'get_weather', arguments: '{"city":"Oslo"}' }, { name: 'b', arguments: '{"n":1}' }]);
    const c = extractMistralToolCalls(`Let me look. ${T} [{"name": "f", "arguments": {}}]`);
    assert.equal(c.content, 'Let me look. ');
    assert.deepEqual(named(c.calls), [{ name: 'f', arguments: '{}' }]);
  });

  it('reads v11 calls, name[ARGS]{...} or name{...}, one marker each', () => {
    const e = extractMistralToolCalls(`${T}get_weather[ARGS]{"city": "Oslo"}${T}time{"tz": "UTC"}`);
    assert.deepEqual(named(e.calls), [{ name: 'get_weather', arguments: '{"city":"Oslo"}' }, { name: 'time', arguments: '{"tz":"UTC"}' }]);
  });

  it('gives each call a 9-character alphanumeric id, which the OpenAI tool call carries', () => {
    const { calls } = extractMistralToolCalls(`${T}[{"name": "a", "arguments": {}}, {"name": "b", "arguments": {}}]`);
    for (const c of calls) assert.match(c.id!, /^[a-zA-Z0-9]{9}$/);
    assert.notEqual(calls[0]!.id, calls[1]!.id);
    assert.equal(toolCallJson(calls[0]!).id, calls[0]!.id);
    assert.match(String(toolCallJson({ name: 'x', arguments: '{}' }).id), /^chatcmpl-tool-/, 'other parsers keep vLLM\'s ids');
  });

  it('leaves anything else as content: no marker, or calls that do not parse', () => {
    for (const text of ['The weather is fine.', `${T}[{"name": "a", "arguments": {`, `${T}[]`, `${T}{"x": 1}`, `Hi ${T}[{"nom": "a"}]`]) {
      assert.deepEqual(extractMistralToolCalls(text), { content: text, calls: [] }, text);
    }
  });

  it('streams the content at once (holding what may begin the marker) and the calls at the end, as the whole parse', () => {
    const p = new MistralToolCallStreamParser();
    assert.deepEqual(p.push('Sure [TOOL'), { content: 'Sure ', calls: [] });
    assert.deepEqual(p.push('S] no'), { content: '[TOOLS] no', calls: [] });
    const outputs = ['Plain words.', `${T}[{"name": "f", "arguments": {"q": "a[b"}}]`, `Checking. ${T}f[ARGS]{"n": 1}${T}g{}`,
      `${T}[{"name": "f", "arguments": {`, 'ends in [TOOL_CALL', '', `[${T}[{"name": "f", "arguments": {}}]`];
    fc.assert(fc.property(fc.constantFrom(...outputs), fc.array(fc.nat(), { maxLength: 6 }), (text, cuts) => {
      const at = [...new Set(cuts.map((c) => c % (text.length + 1)))].sort((a, b) => a - b);
      const s = new MistralToolCallStreamParser();
      let content = '';
      const calls: ParsedToolCall[] = [];
      let from = 0;
      for (const c of [...at, text.length]) {
        const d = s.push(text.slice(from, c));
        content += d.content;
        calls.push(...d.calls);
        from = c;
      }
      const end = s.finish();
      content += end.content;
      calls.push(...end.calls);
      const whole = extractMistralToolCalls(text);
      assert.deepEqual(named(calls), named(whole.calls));
      assert.equal(content, whole.calls.length > 0 ? text.slice(0, text.indexOf(T)) : text, 'the content streamed');
      assert.equal(s.callCount, whole.calls.length);
    }));
  });
});
