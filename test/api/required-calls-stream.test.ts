// tool_choice "required" streamed: each call of the list starts when its name is whole and its arguments follow as
// they are written; for any list the grammar can make, cut anywhere into deltas, the calls are those of the
// whole-output parse (requiredCalls).

import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { RequiredCallsStream } from '../../src/api/required-calls-stream.js';
import { requiredCalls } from '../../src/api/routes/chat-forced.js';

function streamed(parts: string[]): { name: string; args: string }[] {
  const s = new RequiredCallsStream();
  const calls: { name: string; args: string }[] = [];
  for (const p of parts) {
    for (const e of s.push(p)) {
      if (e.kind === 'start') {
        assert.equal(e.index, calls.length, 'calls start in order');
        calls.push({ name: e.name, args: '' });
      } else calls[e.index]!.args += e.delta;
    }
  }
  assert.equal(s.callCount, calls.length);
  return calls;
}

describe('RequiredCallsStream', () => {
  it('starts a call at its name and streams the parameters\' text, strings with braces and escapes included', () => {
    const s = new RequiredCallsStream();
    assert.deepEqual(s.push('[{"name": "sea'), []);
    assert.deepEqual(s.push('rch", "parameters": {"q": "a\\"}'), [{ kind: 'start', index: 0, name: 'search' },
      { kind: 'args', index: 0, delta: '{"q": "a\\"}' }]);
    assert.deepEqual(s.push('", "n": 2}}, {"parameters": {}, "name": "f"}]'), [{ kind: 'args', index: 0, delta: '", "n": 2}' },
      { kind: 'start', index: 1, name: 'f' }, { kind: 'args', index: 1, delta: '{}' }]);
  });

  it('agrees with the whole-output parse for any list cut anywhere into deltas', () => {
    const params = fc.dictionary(fc.string({ maxLength: 5 }), fc.jsonValue({ maxDepth: 2 }), { maxKeys: 3 });
    const list = fc.array(fc.tuple(fc.constantFrom('get_weather', 'search', 'f"q'), params), { minLength: 1, maxLength: 3 });
    fc.assert(fc.property(list, fc.constantFrom(undefined, 1), fc.array(fc.nat(), { maxLength: 8 }), (calls, indent, cuts) => {
      const text = JSON.stringify(calls.map(([name, parameters]) => ({ name, parameters })), null, indent);
      const at = [...new Set(cuts.map((c) => c % (text.length + 1)))].sort((a, b) => a - b);
      const parts = [0, ...at].map((from, i) => text.slice(from, [...at, text.length][i]));
      const whole = requiredCalls(text)!;
      const got = streamed(parts);
      assert.deepEqual(got.map((c) => c.name), whole.map((c) => c.name));
      got.forEach((c, i) => assert.deepEqual(JSON.parse(c.args), JSON.parse(whole[i]!.arguments)));
    }), { numRuns: 300 });
  });
});
