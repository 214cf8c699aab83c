// Structured outputs in the engine (CPU backend, a random tiny model): the grammar decides every token, so even
// random weights produce a listed choice or JSON that matches the schema, greedy or sampled; matchers are freed
// when requests end or are aborted, and a schema that does not compile fails its request alone. Grammars compile in
// grammar hosts, off the engine thread (the second suite).

import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, renameSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { EngineCore } from '../../src/engine/engine-core.js';
import { createEngineCore } from '../../src/engine/create-engine.js';
import { InProcessEngineClient } from '../../src/engine/inprocess-client.js';
import { engineOptions } from '../../src/engine/options.js';
import type { EngineOutput, EngineRequest } from '../../src/engine/types.js';
import { loadModelDir } from '../../src/loader/model-dir.js';
import { defaultSamplingParams } from '../../src/sampling/params.js';
import type { StructuredOutputSpec } from '../../src/sampling/structured-output.js';
import { makeTestModel } from '../../src/tools/make-test-model.js';
import { forcedToolSchema } from '../../src/api/tools.js';
import { requiredCalls } from '../../src/api/routes/chat-forced.js';
import { slowGrammar, trappingSchema, until } from '../sampling/grammar-helpers.js';

describe('structured outputs in the engine', () => {
  let dir: string;
  let client: InProcessEngineClient;
  let decode: (ids: number[]) => string;
  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'quire-structured-'));
    const model = join(dir, 'model');
    await makeTestModel({ shape: 'tiny-qwen3', outDir: model, dtype: 'f32', seed: 0 });
    // the tokenizer from another directory (--tokenizer): the grammar's vocabulary must come from there too
    const tokenizer = join(dir, 'tokenizer');
    mkdirSync(tokenizer);
    for (const f of ['tokenizer.json', 'tokenizer_config.json']) renameSync(join(model, f), join(tokenizer, f));
    const loaded = loadModelDir(model, { tokenizer });
    decode = (ids) => loaded.tokenizer.decode(ids, { skipSpecialTokens: true });
    client = new InProcessEngineClient(await createEngineCore(engineOptions({ model, tokenizer, backend: 'cpu', cpuThreads: 1,
      maxModelLen: 512 }), loaded));
  });
  after(async () => {
    await client.shutdown();
    rmSync(dir, { recursive: true, force: true });
  });

  let n = 0;
  async function run(spec: StructuredOutputSpec, temperature: number, seed: number, abortAfter?: number, maxTokens = 80): Promise<{ text: string; last: EngineOutput }> {
    const requestId = `s${n++}`;
    const ids: number[] = [];
    let last: EngineOutput | null = null;
    for await (const o of client.generate({
      requestId, promptTokenIds: [11, 22, 33 + seed], priority: 0, cacheSalt: null, arrivalTime: Date.now(),
      sampling: defaultSamplingParams({ maxTokens, temperature, seed, structuredOutput: spec }),
    })) {
      ids.push(...o.newTokenIds);
      last = o;
      if (abortAfter !== undefined && ids.length >= abortAfter && !o.finished) client.abort(requestId);
    }
    return { text: decode(ids), last: last! };
  }

  it('gives one of the choices, greedy or sampled, and ends with a stop', async () => {
    const choices = ['red', 'green', 'blue sky'];
    for (const [temperature, seed] of [[0, 0], [1, 1], [1, 2], [1.5, 3]] as const) {
      const { text, last } = await run({ type: 'choice', choices }, temperature, seed);
      assert.ok(choices.includes(text), text);
      assert.equal(last.finishReason, 'stop');
    }
  });

  it('gives text that matches a regex, or an EBNF grammar', async () => {
    for (const seed of [1, 2, 3]) {
      const r = await run({ type: 'regex', pattern: '[a-c]{2}-[0-9]{1,3}' }, 1, seed);
      assert.match(r.text, /^[a-c]{2}-[0-9]{1,3}$/);
      const g = await run({ type: 'grammar', ebnf: 'root ::= "(" item ("," item)* ")"\nitem ::= "x" | "yy"' }, 1, seed, undefined, 200);
      assert.equal(g.last.finishReason, 'stop', g.text);
      assert.match(g.text, /^\((x|yy)(,(x|yy))*\)$/);
    }
  });

  it('gives a structural tag: its begin, JSON of its schema, its end', async () => {
    const schema = { type: 'object', properties: { n: { type: 'integer' } }, required: ['n'], additionalProperties: false };
    const tag = JSON.stringify({ type: 'structural_tag', format: { type: 'tag', begin: '<f>', content: { type: 'json_schema', json_schema: schema }, end: '</f>' } });
    for (const seed of [1, 2, 3]) {
      const { text, last } = await run({ type: 'structural_tag', tag }, 1, seed, undefined, 120);
      assert.equal(last.finishReason, 'stop', text);
      const m = /^<f>(.*)<\/f>$/s.exec(text);
      assert.ok(m, text);
      assert.ok(Number.isInteger((JSON.parse(m[1]!) as { n: unknown }).n), text);
    }
  });

  it('gives JSON that matches the schema', async () => {
    const schema = { type: 'object', properties: { colour: { enum: ['red', 'blue'] }, n: { type: 'integer' }, ok: { type: 'boolean' } },
      required: ['colour', 'n', 'ok'], additionalProperties: false };
    for (const seed of [1, 2, 3]) {
      const { text, last } = await run({ type: 'json', schema: JSON.stringify(schema) }, 1, seed);
      assert.equal(last.finishReason, 'stop', text);
      const v = JSON.parse(text) as Record<string, unknown>;
      assert.deepEqual(Object.keys(v).sort(), ['colour', 'n', 'ok']);
      assert.ok(['red', 'blue'].includes(v.colour as string) && Number.isInteger(v.n) && typeof v.ok === 'boolean', text);
    }
  });

  it('gives a list of calls for tool_choice "required" (the API layer\'s schema)', async () => {
    const tools = [{ type: 'function' as const, function: { name: 'pick', parameters: { type: 'object', properties: { c: { enum: ['a', 'b'] } }, required: ['c'], additionalProperties: false } } }];
    const schema = forcedToolSchema({ kind: 'required' }, tools)!;
    for (const seed of [0, 1, 2, 3]) {
      const { text, last } = await run({ type: 'json', schema }, 1, seed, undefined, 400);
      assert.equal(last.finishReason, 'stop', text);
      const calls = requiredCalls(text);
      assert.ok(calls !== null && calls.length >= 1, text);
      for (const c of calls) assert.ok(c.name === 'pick' && ['a', 'b'].includes(JSON.parse(c.arguments).c), text);
    }
  });

  it('frees every matcher when requests end or are aborted', async () => {
    await run({ type: 'json', schema: '{"type": "object"}' }, 1, 4, 3);
    assert.equal(client.core.numConstraints, 0);
  });

  it('fails a request whose schema does not compile, and serves the next', async () => {
    const { last } = await run({ type: 'json', schema: '{"type": "object", "properties": {"a": {"$ref": "#/nowhere"}}}' }, 0, 5);
    assert.equal(last.finishReason, 'error');
    assert.match(last.error ?? '', /does not compile: .*Cannot find field nowhere/);
    const { text } = await run({ type: 'choice', choices: ['yes', 'no'] }, 0, 6);
    assert.ok(['yes', 'no'].includes(text));
  });
});

// The engine thread never compiles: grammars compile in grammar hosts, so other requests step on meanwhile; a trapped
// compile or a failed host ends its own requests alone; shutdown ends a host in the middle of a compile.
describe('structured outputs: grammars compile off the engine thread', () => {
  let dir: string;
  let model: string;
  let core: EngineCore;
  let decode: (ids: number[]) => string;
  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'quire-grammar-hosts-'));
    model = join(dir, 'model');
    await makeTestModel({ shape: 'tiny-qwen3', outDir: model, dtype: 'f32', seed: 0 });
    const loaded = loadModelDir(model, {});
    decode = (ids) => loaded.tokenizer.decode(ids, { skipSpecialTokens: true });
    core = await createEngineCore(engineOptions({ model, backend: 'cpu', cpuThreads: 1, maxModelLen: 512, grammarHosts: 2 }), loaded);
  });
  after(() => {
    core.dispose();
    rmSync(dir, { recursive: true, force: true });
  });

  const SCHEMA: StructuredOutputSpec = { type: 'json', schema: JSON.stringify({ type: 'object', properties: {
    colour: { enum: ['red', 'blue'] }, n: { type: 'integer' }, ok: { type: 'boolean' } }, required: ['colour', 'n', 'ok'],
    additionalProperties: false }) };
  // a constrained request as the first suite's JSON one with seed 1 (which ends with a stop); a plain one greedy
  const request = (requestId: string, spec: StructuredOutputSpec | null, maxTokens: number): EngineRequest => ({
    requestId, promptTokenIds: [11, 22, 34], priority: 0, cacheSalt: null, arrivalTime: Date.now(),
    sampling: defaultSamplingParams({ maxTokens, temperature: spec === null ? 0 : 1, seed: 1, ignoreEos: spec === null,
      structuredOutput: spec }),
  });
  const outputs = new Map<string, EngineOutput[]>();
  const of = (id: string) => outputs.get(id) ?? [];
  const tokensOf = (id: string) => of(id).flatMap((o) => o.newTokenIds);
  const finished = (id: string) => of(id).some((o) => o.finished);
  /** One engine step, after the event loop has run (the hosts' answers land); idle, it waits for the engine's kick. */
  async function turn(): Promise<void> {
    if (core.hasWork()) await new Promise((r) => setImmediate(r));
    else await new Promise<void>((r) => (core.onWork = () => r()));
    for (const o of core.step()) outputs.set(o.requestId, [...of(o.requestId), o]);
  }

  it('steps other requests while a grammar compiles; aborting the request ends its compile', async () => {
    const hosts = core.grammars!.hosts;
    const ended = hosts.numEnded;
    core.addRequest(request('slow', slowGrammar(3000), 4));
    await until(() => hosts.numCompilesBegun === 1);
    const stepsBefore = core.stats().numSteps;
    core.addRequest(request('free', null, 16));
    while (!finished('free')) await turn();
    assert.equal(tokensOf('free').length, 16);
    assert.ok(core.stats().numSteps - stepsBefore >= 16);
    assert.deepEqual(of('slow'), [], 'the compiling request was not scheduled');
    assert.equal(hosts.numCompiling, 1, 'its grammar still compiles');
    assert.deepEqual(core.abortRequest('slow').map((o) => o.finishReason), ['abort']);
    assert.equal(hosts.numEnded, ended + 1, 'the host compiling for nobody was ended');
    assert.equal(core.numConstraints, 0);
  });

  it('fails a request whose compile traps, alone: a constrained request in flight completes', async () => {
    core.addRequest(request('json', SCHEMA, 80));
    while (tokensOf('json').length < 2) await turn();
    const ended = core.grammars!.hosts.numEnded;
    core.addRequest(request('trap', trappingSchema(), 8));
    // no step until the trap is reported: the JSON request is mid-way when its neighbour's host traps
    await new Promise<void>((r) => (core.onWork = () => r()));
    while (!finished('json')) await turn();
    const trap = of('trap');
    assert.equal(trap.length, 1);
    assert.equal(trap[0]!.finishReason, 'error');
    assert.equal(trap[0]!.error, 'the structured output does not compile: the grammar compiler failed');
    assert.equal(core.grammars!.hosts.numEnded, ended + 1);
    assert.equal(of('json').at(-1)!.finishReason, 'stop');
    const v = JSON.parse(decode(tokensOf('json'))) as Record<string, unknown>;
    assert.deepEqual(Object.keys(v).sort(), ['colour', 'n', 'ok']);
    assert.equal(core.numConstraints, 0);
  });

  it('ends the requests of a host that fails mid-generation with an error; the others step on', async () => {
    core.addRequest(request('held', SCHEMA, 80));
    core.addRequest(request('plain', null, 12));
    while (tokensOf('held').length < 1) await turn();
    assert.equal(core.grammars!.hosts.numHosts, 1);
    core.grammars!.hosts.endHost(0);
    while (!finished('plain') || !finished('held')) await turn();
    assert.equal(of('held').at(-1)!.finishReason, 'error');
    assert.match(of('held').at(-1)!.error ?? '', /grammar matcher failed \(its worker was replaced; other requests are unaffected\)/);
    assert.equal(tokensOf('plain').length, 12);
    assert.equal(core.numConstraints, 0);
  });

  it('shuts down during a compile: the host\'s thread is ended, not waited for', async () => {
    const other = await createEngineCore(engineOptions({ model, backend: 'cpu', cpuThreads: 1, maxModelLen: 512 }));
    const hosts = other.grammars!.hosts;
    other.addRequest(request('slow', slowGrammar(3000), 4));
    await until(() => hosts.numCompilesBegun === 1);
    other.dispose();
    await hosts.close(); // resolves when the host's thread has exited
    assert.equal(hosts.numHosts, 0);
  });
});
