// Hermes tool calls out of generated text: the whole-output parse (vLLM's rules) and the stream parser, which must
// give the same content and calls however the text is cut into deltas.

import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { extractToolCalls, ToolCallStreamParser, type ToolStreamDelta } from '../../src/api/tool-parser.js';

const call = (name: string, args: unknown) => `<tool_call>\n${JSON.stringify({ name, arguments: args })}\n</tool_call>`;

/** Feeds `parts` through a stream parser; content and calls joined. */
function streamed(parts: string[]): { content: string; calls: ToolStreamDelta['calls'] } {
  const p = new ToolCallStreamParser();
  const all: ToolStreamDelta[] = [...parts.map((s) => p.push(s)), p.finish()];
  return { content: all.map((d) => d.content).join(''), calls: all.flatMap((d) => d.calls) };
}

describe('extractToolCalls', () => {
  it('leaves text without a call as content', () => {
    assert.deepEqual(extractToolCalls('Just words.'), { content: 'Just words.', calls: [] });
  });

  it('takes the text before the first call as content, and every call with its arguments as JSON', () => {
    const text = `Let me look.${call('get_weather', { city: 'Paris' })}\n${call('get_time', { zone: 'CET', exact: true })}`;
    const r = extractToolCalls(text);
    assert.equal(r.content, 'Let me look.');
    assert.deepEqual(r.calls.map((c) => [c.name, JSON.parse(c.arguments)]), [
      ['get_weather', { city: 'Paris' }], ['get_time', { zone: 'CET', exact: true }],
    ]);
  });

  it('gives null content when the output starts with a call, and {} for missing arguments', () => {
    const r = extractToolCalls('<tool_call>{"name": "now"}</tool_call>');
    assert.equal(r.content, null);
    assert.deepEqual(r.calls, [{ name: 'now', arguments: '{}' }]);
  });

  it('counts a last block left open when its JSON is whole (generation ended before the closing tag)', () => {
    const r = extractToolCalls('<tool_call>{"name": "f", "arguments": {"x": 1}}');
    assert.deepEqual(r.calls, [{ name: 'f', arguments: '{"x":1}' }]);
  });

  it('returns everything as content when any block is not a call (broken JSON, no name, arguments not an object)', () => {
    for (const bad of ['{"name": "f", "arguments": {', '{"arguments": {}}', '{"name": "f", "arguments": [1]}', 'plain']) {
      const text = `Hi ${call('ok', {})}<tool_call>${bad}</tool_call>`;
      assert.deepEqual(extractToolCalls(text), { content: text, calls: [] }, bad);
    }
  });
});

describe('ToolCallStreamParser', () => {
  it('streams content at once, holds back only what may be the start of a tag, and sends a call when it closes', () => {
    const p = new ToolCallStreamParser();
    assert.deepEqual(p.push('Sure, '), { content: 'Sure, ', calls: [] });
    assert.deepEqual(p.push('one moment <tool'), { content: 'one moment ', calls: [] });
    assert.deepEqual(p.push('_call>{"name": "f", '), { content: '', calls: [] });
    assert.deepEqual(p.push('"arguments": {"a": "<b>"}}</tool_'), { content: '', calls: [] });
    assert.deepEqual(p.push('call>'), { content: '', calls: [{ name: 'f', arguments: '{"a":"<b>"}' }] });
    assert.equal(p.callCount, 1);
    assert.deepEqual(p.finish(), { content: '', calls: [] });
  });

  it('releases a held-back partial tag at the end when it never became one', () => {
    assert.deepEqual(streamed(['a < b and <tool', '_c']), { content: 'a < b and <tool_c', calls: [] });
    assert.deepEqual(streamed(['ends with <tool_ca']), { content: 'ends with <tool_ca', calls: [] });
  });

  it('sends a block that does not parse as content; parses a block left open at the end', () => {
    assert.deepEqual(streamed(['x<tool_call>{oops}</tool_call>']), { content: 'x<tool_call>{oops}</tool_call>', calls: [] });
    assert.deepEqual(streamed(['<tool_call>{"name": "g", "arguments": {}}']), { content: '', calls: [{ name: 'g', arguments: '{}' }] });
    assert.deepEqual(streamed(['<tool_call>{"name": "g"']), { content: '<tool_call>{"name": "g"', calls: [] });
  });

  it('agrees with the whole-output parse for any cut of valid outputs into deltas', () => {
    const prose = fc.string({ maxLength: 12 }).filter((s) => !s.includes('<tool_call>'));
    const args = fc.dictionary(fc.string({ maxLength: 5 }), fc.oneof(fc.string({ maxLength: 6 }), fc.integer(), fc.boolean()),
      { maxKeys: 3 });
    const output = fc.record({
      before: prose,
      calls: fc.array(fc.tuple(fc.constantFrom('get_weather', 'search', 'f'), args, prose), { maxLength: 3 }),
      open: fc.boolean(),
    }).map(({ before, calls, open }) => {
      let text = before;
      calls.forEach(([name, a, between], i) => {
        const block = call(name, a);
        text += open && i === calls.length - 1 ? block.slice(0, -'</tool_call>'.length) : block + between;
      });
      return text;
    });
    fc.assert(fc.property(output, fc.array(fc.nat(), { maxLength: 8 }), (text, cuts) => {
      const at = [...new Set(cuts.map((c) => c % (text.length + 1)))].sort((a, b) => a - b);
      const parts = [0, ...at].map((from, i) => text.slice(from, [...at, text.length][i]));
      const whole = extractToolCalls(text);
      const s = streamed(parts);
      assert.equal(s.content, whole.content ?? '');
      assert.deepEqual(s.calls, whole.calls);
    }), { numRuns: 300 });
  });
});
