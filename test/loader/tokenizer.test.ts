import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { ModelLoadError } from '../../src/loader/errors.js';
import { loadTokenizer, tokenizerFromJson } from '../../src/loader/tokenizer.js';
import { TRAINING_TEXT, makeTestTokenizer } from '../../src/tools/test-model/bpe.js';
import { QWEN3_TOKENIZER_DIR, tempDir } from './helpers.js';

const qwen = loadTokenizer(QWEN3_TOKENIZER_DIR);
const qwenJson = JSON.parse(readFileSync(join(QWEN3_TOKENIZER_DIR, 'tokenizer.json'), 'utf8'));
const qwenAdded = new Map<string, number>(qwenJson.added_tokens.map((t: { content: string; id: number }) => [t.content, t.id]));
const small = makeTestTokenizer();
const tiny = tokenizerFromJson(small.tokenizerJson, small.tokenizerConfig);

const samples = [
  'Hello, world! The quick brown fox jumps over the lazy dog.',
  "  leading spaces, tabs\tand\nnew lines\n\n; it's 2026 — über café 日本語 🙂",
  'x',
];

test('qwen3: text round-trips, specials are single ids from added_tokens', () => {
  for (const s of samples) assert.equal(qwen.decode(qwen.encode(s)), s);
  const ids = qwen.encode('<|im_start|>user\nhi<|im_end|>');
  assert.equal(ids[0], qwenAdded.get('<|im_start|>'));
  assert.equal(ids.at(-1), qwenAdded.get('<|im_end|>'));
  assert.deepEqual(qwen.eosTokenIds, [qwenAdded.get('<|im_end|>')]);
  assert.equal(qwen.bosTokenId, null);
  assert.equal(qwen.vocabSize, Math.max(...qwenAdded.values()) + 1);
  assert.ok(qwen.specialTokenIds.has(qwenAdded.get('<|endoftext|>')!));
  assert.ok(!qwen.specialTokenIds.has(qwenAdded.get('<think>')!), '<think> is an added token, not a special one');
});

test('qwen3: decode with and without skipping specials; idToToken', () => {
  const ids = qwen.encode('<|im_start|>assistant\nSure.<|im_end|>');
  assert.equal(qwen.decode(ids), '<|im_start|>assistant\nSure.<|im_end|>');
  assert.equal(qwen.decode(ids, { skipSpecialTokens: true }), 'assistant\nSure.');
  assert.equal(qwen.decode([]), '');
  const the = qwen.encode(' the');
  assert.equal(the.length, 1);
  assert.equal(qwen.idToToken(the[0]!), 'Ġthe');
  assert.equal(qwenJson.model.vocab['Ġthe'], the[0]);
  assert.equal(qwen.idToToken(qwenAdded.get('<|im_end|>')!), '<|im_end|>');
  assert.equal(qwen.idToToken(10_000_000), undefined);
});

test('generated tokenizer: round-trips text, merges compress, specials are single ids', () => {
  for (const s of [...samples, TRAINING_TEXT]) assert.equal(tiny.decode(tiny.encode(s)), s);
  const numBytes = new TextEncoder().encode(TRAINING_TEXT).byteLength;
  assert.ok(tiny.encode(TRAINING_TEXT).length < numBytes / 2, 'merges shorten the training text');
  assert.ok(tiny.vocabSize > 256 + 100 && tiny.vocabSize < 512, `vocab ${tiny.vocabSize}`);
  const ids = tiny.encode('<|im_start|>user\nhi<|im_end|><|endoftext|>');
  assert.equal(ids[0], small.specialTokenIds['<|im_start|>']);
  assert.deepEqual(ids.slice(-2), [small.specialTokenIds['<|im_end|>'], small.specialTokenIds['<|endoftext|>']]);
  assert.deepEqual([...tiny.specialTokenIds].sort(), Object.values(small.specialTokenIds).sort());
  assert.deepEqual(tiny.eosTokenIds, [small.specialTokenIds['<|im_end|>']]);
  assert.equal(tiny.decode(ids, { skipSpecialTokens: true }), 'user\nhi');
  for (let id = 0; id < tiny.vocabSize; id++) assert.notEqual(tiny.idToToken(id), undefined, `id ${id}`);
});

test('generated tokenizer is the same every time (deterministic training)', () => {
  assert.deepEqual(makeTestTokenizer().tokenizerJson, small.tokenizerJson);
});

test('loadTokenizer: missing tokenizer.json, malformed files, unknown eos token', () => {
  const dir = tempDir();
  assert.throws(() => loadTokenizer(dir), (e: unknown) => e instanceof ModelLoadError && e.message === 'tokenizer.json: file not found');
  writeFileSync(join(dir, 'tokenizer.json'), '{"model": ');
  assert.throws(() => loadTokenizer(dir), /^ModelLoadError: tokenizer.json: cannot read/);
  writeFileSync(join(dir, 'tokenizer.json'), JSON.stringify(small.tokenizerJson));
  writeFileSync(join(dir, 'tokenizer_config.json'), JSON.stringify({ ...small.tokenizerConfig, eos_token: { content: '<|im_end|>' } }));
  assert.deepEqual(loadTokenizer(dir).eosTokenIds, [small.specialTokenIds['<|im_end|>']], 'eos_token as { content }');
  writeFileSync(join(dir, 'tokenizer_config.json'), JSON.stringify({ ...small.tokenizerConfig, eos_token: { content: '</s>' } }));
  assert.throws(() => loadTokenizer(dir), /tokenizer.json: eos_token "<\/s>" is not in the vocabulary/);
  writeFileSync(join(dir, 'tokenizer.json'), JSON.stringify({ model: { type: 'BPE' } }));
  assert.throws(() => loadTokenizer(dir), /tokenizer.json: has no model.vocab/);
});
