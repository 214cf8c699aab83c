// Grammar hosts: matchers made in worker threads mask and advance exactly as xgrammar does on the calling thread; a
// host is sent a compile only while it holds no matcher (another host compiles meanwhile, or the grammar waits while
// the host drains); a host that traps, crashes or does not answer fails its own matchers alone; a compile nobody
// waits for any more, and close(), end the host's thread whatever it is compiling; a host reads the vocabulary itself.

import { after, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { GrammarHosts } from '../../src/sampling/grammar-hosts.js';
import { HostedConstraint, newChannel, newDoorbell } from '../../src/sampling/grammar-channel.js';
import {
  compileSpec, createGrammarCompiler, GrammarCompileError, grammarVocabFromTokenizerJson, xgrammar,
  type GrammarVocab, type StructuredOutputSpec, type TokenConstraint,
} from '../../src/sampling/structured-output.js';
import { repoRoot } from '../loader/helpers.js';
import { slowGrammar, trappingSchema, until } from './grammar-helpers.js';

const VOCAB_SIZE = 6144;
const demoVocab = (): GrammarVocab => grammarVocabFromTokenizerJson(
  JSON.parse(readFileSync(join(repoRoot(), 'models', 'quire-demo', 'tokenizer.json'), 'utf8')) as Record<string, unknown>,
  VOCAB_SIZE, [2]);

const SCHEMA: StructuredOutputSpec = { type: 'json', schema: JSON.stringify({ type: 'object', properties: {
  colour: { enum: ['red', 'blue'] }, n: { type: 'integer' } }, required: ['colour', 'n'], additionalProperties: false }) };
const CHOICE: StructuredOutputSpec = { type: 'choice', choices: ['yes', 'no', 'maybe so'] };

/** Pseudo-random logits (an LCG: the same rows every run). */
function rows(seed: number): () => Float32Array {
  let x = seed;
  return () => Float32Array.from({ length: VOCAB_SIZE }, () => ((x = (x * 1103515245 + 12345) % 2147483648) / 2147483648) * 8);
}

const argmax = (row: Float32Array) => row.reduce((best, v, i) => (v > row[best]! ? i : best), 0);

/**
 * Walks `c` greedily over seeded rows beside a matcher on this thread (which first takes `taken`, the tokens `c` has
 * had); asserts the same mask at every step.
 */
async function walkBesideReference(c: TokenConstraint, spec: StructuredOutputSpec, seed: number, taken: number[] = []): Promise<number> {
  const xg = xgrammar();
  const ref = await xg.GrammarMatcher.createGrammarMatcher(await compileSpec(await createGrammarCompiler(demoVocab()), spec));
  for (const t of taken) assert.ok(ref.acceptToken(t));
  const next = rows(seed);
  let steps = 0;
  while (!ref.isTerminated()) {
    const row = next();
    const expected = row.slice();
    c.maskLogits(row, VOCAB_SIZE);
    const bits = await ref.getNextTokenBitmask();
    for (let t = 0; t < VOCAB_SIZE; t++) if (((bits[t >>> 5]! >>> (t & 31)) & 1) === 0) expected[t] = -Infinity;
    assert.deepEqual(row, expected, `step ${steps}`);
    const token = argmax(row);
    assert.ok(ref.acceptToken(token));
    c.accept(token);
    steps++;
  }
  ref.dispose();
  return steps;
}

describe('grammar hosts', () => {
  const opened: GrammarHosts[] = [];
  const hostsOf = (o: ConstructorParameters<typeof GrammarHosts>[1], vocab: ConstructorParameters<typeof GrammarHosts>[0] = demoVocab) => {
    const h = new GrammarHosts(vocab, o);
    opened.push(h);
    return h;
  };
  after(async () => {
    await Promise.all(opened.map((h) => h.close()));
  });

  it('masks and advances as xgrammar on this thread does, step by step', async () => {
    const hosts = hostsOf({ maxHosts: 2 });
    for (const [spec, seed] of [[SCHEMA, 1], [CHOICE, 2], [SCHEMA, 3]] as const) {
      const c = await hosts.request(spec).constraint;
      assert.ok(await walkBesideReference(c, spec, seed) > 1);
      assert.equal(c.failure(), null);
      c.dispose();
    }
    assert.equal(hosts.numCompiles, 2, 'a grammar a host has is not compiled again');
  });

  it('sends no compile to a host that holds a matcher: the grammar waits, the host drains, then it compiles', async () => {
    const hosts = hostsOf({ maxHosts: 1 });
    const held = await hosts.request(SCHEMA).constraint;
    let ready = false;
    const choice = hosts.request(CHOICE).constraint.then((c) => ((ready = true), c));
    const again = hosts.request(SCHEMA).constraint;
    assert.equal(hosts.numCompiling, 0, 'no compile while the only host holds a matcher');
    await new Promise((r) => setImmediate(r));
    assert.equal(ready, false);
    held.dispose();
    assert.equal(hosts.numCompiling, 1, 'the host, idle, compiles the grammar that waited');
    const [c, s] = await Promise.all([choice, again]);
    await walkBesideReference(c, CHOICE, 4);
    await walkBesideReference(s, SCHEMA, 5);
    assert.equal(hosts.numHosts, 1);
  });

  it('compiles in another host while one holds a matcher', async () => {
    const hosts = hostsOf({ maxHosts: 2 });
    const held = await hosts.request(SCHEMA).constraint;
    const c = await hosts.request(CHOICE).constraint;
    assert.equal(hosts.numHosts, 2);
    await walkBesideReference(held, SCHEMA, 6);
    await walkBesideReference(c, CHOICE, 7);
  });

  it('fails a trapped compile\'s request alone: a matcher in another host keeps masking', async () => {
    const hosts = hostsOf({ maxHosts: 2 });
    const held = await hosts.request(SCHEMA).constraint;
    const row = rows(8)();
    held.maskLogits(row, VOCAB_SIZE);
    const first = argmax(row);
    held.accept(first);
    await assert.rejects(hosts.request(trappingSchema()).constraint, (e: unknown) =>
      e instanceof GrammarCompileError && e.trapped && e.reason === null);
    assert.equal(hosts.numEnded, 1, 'the trapped host was ended');
    assert.equal(held.failure(), null);
    await walkBesideReference(held, SCHEMA, 9, [first]);
    held.dispose();
  });

  it('fails the matchers of a host that crashed, and serves the next request from a fresh host', async () => {
    const hosts = hostsOf({ maxHosts: 1 });
    const c = await hosts.request(CHOICE).constraint;
    hosts.endHost(0);
    assert.match(c.failure() ?? '', /grammar matcher failed/);
    const row = rows(10)();
    const before = row.slice();
    c.maskLogits(row, VOCAB_SIZE);
    c.accept(1);
    assert.deepEqual(row, before, 'a failed matcher leaves the row alone (its request is ended)');
    c.dispose();
    await walkBesideReference(await hosts.request(CHOICE).constraint, CHOICE, 11);
  });

  it('ends the host of a compile nobody waits for any more', async () => {
    const hosts = hostsOf({ maxHosts: 1 });
    const r = hosts.request(slowGrammar(3000));
    await until(() => hosts.numCompilesBegun === 1);
    const rejected = assert.rejects(r.constraint, /cancelled/);
    r.cancel();
    await rejected;
    assert.equal(hosts.numHosts, 0);
    assert.equal(hosts.numEnded, 1);
    await walkBesideReference(await hosts.request(CHOICE).constraint, CHOICE, 12);
  });

  it('closes at once while a host compiles: its thread is ended (close resolves on its exit), the request rejected', async () => {
    const hosts = new GrammarHosts(demoVocab, { maxHosts: 1 });
    const r = hosts.request(slowGrammar(3000));
    await until(() => hosts.numCompilesBegun === 1);
    const rejected = assert.rejects(r.constraint, /closed/);
    await hosts.close();
    assert.equal(hosts.numHosts, 0);
    await rejected;
    await assert.rejects(hosts.request(CHOICE).constraint, /closed/);
  });

  it('reads the vocabulary in the host: a file that cannot be read fails every request, and leaves no thread', async () => {
    const hosts = hostsOf({}, { tokenizerJsonPath: join(repoRoot(), 'models', 'no-such-model', 'tokenizer.json'), vocabSize: 8, stopTokenIds: [] });
    await assert.rejects(hosts.request(CHOICE).constraint, /structured outputs cannot start: ENOENT/);
    await assert.rejects(hosts.request(SCHEMA).constraint, /structured outputs cannot start/);
    assert.equal(hosts.numHosts, 0);
  });

  it('bounds the wait for a mask: a host that never answers fails the matcher, not the caller', () => {
    let stuck = 0;
    const c = new HostedConstraint(newChannel(VOCAB_SIZE), newDoorbell(), 20, () => stuck++, () => {});
    c.accept(5);
    const row = new Float32Array(VOCAB_SIZE).fill(1);
    c.maskLogits(row, VOCAB_SIZE);
    assert.equal(stuck, 1);
    assert.match(c.failure() ?? '', /grammar matcher failed/);
    assert.ok(row.every((v) => v === 1));
  });
});
