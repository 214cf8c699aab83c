import { test } from 'node:test';
import assert from 'node:assert/strict';
import { checkStop, type StopCheckState } from '../../src/sampling/stop.js';

const EOS = 2;

function state(overrides: Partial<StopCheckState['sampling']>, numOutputTokens: number, maxModelLen = 1000): StopCheckState {
  return {
    sampling: { maxTokens: 10, minTokens: 0, ignoreEos: false, stopTokenIds: [], ...overrides },
    numPromptTokens: 5,
    numOutputTokens,
    maxModelLen,
  };
}

test('EOS stops unless ignoreEos', () => {
  assert.deepEqual(checkStop(state({}, 1), EOS, [EOS]), { reason: 'stop', stopTokenId: EOS, eos: true });
  assert.equal(checkStop(state({ ignoreEos: true }, 1), EOS, [EOS]), null);
  assert.equal(checkStop(state({}, 1), 7, [EOS]), null);
});

test('stop token ids stop, ignoreEos or not', () => {
  assert.deepEqual(checkStop(state({ stopTokenIds: [9] }, 1), 9, [EOS]), { reason: 'stop', stopTokenId: 9, eos: false });
  assert.deepEqual(checkStop(state({ stopTokenIds: [9], ignoreEos: true }, 1), 9, [EOS]), { reason: 'stop', stopTokenId: 9, eos: false });
});

test('stop tokens do not count before minTokens new tokens', () => {
  assert.equal(checkStop(state({ minTokens: 3, stopTokenIds: [9] }, 2), EOS, [EOS]), null);
  assert.equal(checkStop(state({ minTokens: 3, stopTokenIds: [9] }, 2), 9, [EOS]), null);
  assert.deepEqual(checkStop(state({ minTokens: 3 }, 3), EOS, [EOS]), { reason: 'stop', stopTokenId: EOS, eos: true });
});

test('maxTokens and max model length end with length', () => {
  assert.equal(checkStop(state({ maxTokens: 4 }, 3), 7, [EOS]), null);
  assert.deepEqual(checkStop(state({ maxTokens: 4 }, 4), 7, [EOS]), { reason: 'length' });
  assert.equal(checkStop(state({}, 2, 8), 7, [EOS]), null);
  assert.deepEqual(checkStop(state({}, 3, 8), 7, [EOS]), { reason: 'length' });
});

test('a stop token on the last allowed token reports stop, not length', () => {
  assert.deepEqual(checkStop(state({ maxTokens: 4 }, 4), EOS, [EOS]), { reason: 'stop', stopTokenId: EOS, eos: true });
});
