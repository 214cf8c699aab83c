// quire gate --dump-peer's writer against a fake llama-server (v0.5.0's /completion shape): the dump holds the
// peer's greedy tokens and its top-k logprobs a step; a response without the fields it needs is refused by name.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  dumpPeerReference, llamaCppCompletionBody, parseLlamaCppCompletion, readReferenceFile, type GatePromptSet,
} from '../../src/lab/gate.js';
import { llamaCppListedSteps, utf8CompleteLength } from '../../src/lab/peer-dump.js';
import { llamaCppResponse, startFakeLlamaServer, type FakeStep } from './fake-llama-server.js';

const VOCAB = 64;

/** A deterministic toy model: logits of the next token after `seq`, from a hash of the sequence. */
function toyLogits(seq: readonly number[]): number[] {
  let h = 2166136261;
  for (const t of seq) h = Math.imul(h ^ t, 16777619);
  return Array.from({ length: VOCAB }, (_, i) => (((Math.imul(h ^ (i * 2654435761), 2246822519) >>> 0) % 10007) / 1000));
}

/** Log-softmax in float32 the way llama.cpp reports it, top n most likely first. */
function toyTop(seq: readonly number[], n: number): { id: number; logprob: number }[] {
  const l = toyLogits(seq);
  const max = Math.max(...l);
  const lse = max + Math.log(l.reduce((s, x) => s + Math.exp(x - max), 0));
  return l.map((x, id) => ({ id, logprob: Math.fround(x - lse) })).sort((a, b) => b.logprob - a.logprob).slice(0, n);
}

/** What the toy llama-server generates greedily for a request body. */
function toySteps(body: Record<string, unknown>): FakeStep[] {
  const seq = [...(body.prompt as number[])];
  const steps: FakeStep[] = [];
  for (let k = 0; k < (body.n_predict as number); k++) {
    const top = toyTop(seq, body.n_probs as number);
    steps.push({ id: top[0]!.id, top });
    seq.push(top[0]!.id);
  }
  return steps;
}

const encode = (text: string): number[] => [...text].map((c) => c.codePointAt(0)! % VOCAB);
const prompts: GatePromptSet = { maxTokens: 6, prompts: [{ id: 'a', prompt: 'The capital of France is' }, { id: 'b', prompt: [3, 1, 4, 1, 5] }] };

test('the dump holds the peer\'s greedy tokens and each step\'s top-20 logprobs, from token-id prompts', async () => {
  const server = await startFakeLlamaServer((body) => llamaCppResponse(body, toySteps(body)));
  try {
    const dump = await dumpPeerReference({ url: server.url, prompts, encode });
    assert.equal(dump.peer.kind, 'llama.cpp');
    assert.equal(dump.peer.props?.build_info, 'b0-v0.5.0');
    assert.deepEqual(dump.prompts.map((p) => p.id), ['a', 'b']);
    for (const [i, p] of dump.prompts.entries()) {
      const given = prompts.prompts[i]!.prompt;
      const ids = typeof given === 'string' ? encode(given) : given;
      assert.deepEqual(p.prompt, ids, 'the prompt is sent and recorded as the tokenizer\'s ids');
      assert.deepEqual(server.bodies[i]!.prompt, ids);
      assert.equal(p.greedy.length, prompts.maxTokens);
      assert.equal(p.steps.length, prompts.maxTokens);
      // each step is the toy model's distribution after the prompt and the greedy tokens before it
      for (const [k, s] of p.steps.entries()) {
        assert.equal(s.position, ids.length + k);
        const want = toyTop([...ids, ...p.greedy.slice(0, k)], 20);
        assert.deepEqual(s.top, want.map((t) => ({ tokenId: t.id, logprob: t.logprob })));
        assert.equal(p.greedy[k], want[0]!.id, 'greedy is the argmax');
      }
    }
    // the request asks for what the dump needs: greedy argmax only, pre-sampling top-20, the ids back, no prompt cache
    const b = server.bodies[0]!;
    assert.deepEqual({ ...b, prompt: undefined }, { ...llamaCppCompletionBody([], 6, 20, true), prompt: undefined });
    assert.equal(b.temperature, 0);
    assert.deepEqual(b.samplers, ['temperature']);
    assert.equal(b.n_probs, 20);
    assert.equal(b.post_sampling_probs, false);
    assert.equal(b.return_tokens, true);
    assert.equal(b.cache_prompt, false);

    // and the gate reads it as a top-k reference, each step's prefix being prompt + greedy so far
    const { reference, prefixes } = readReferenceFile(JSON.parse(JSON.stringify(dump)), 'dump.json');
    assert.deepEqual(reference.prompts.map((p) => p.steps.length), [6, 6]);
    assert.ok('top' in reference.prompts[0]!.steps[0]!);
    assert.deepEqual(prefixes[1]!.steps[2], [3, 1, 4, 1, 5, ...dump.prompts[1]!.greedy.slice(0, 2)]);
  } finally {
    await server.close();
  }
});

test('probabilities (post-sampling naming) become logprobs; a zero probability entry is left out', () => {
  const top = toyTop([1, 2], 20);
  const body = { tokens: [top[0]!.id], stop_type: 'limit', completion_probabilities: [{ id: top[0]!.id, prob: Math.exp(top[0]!.logprob),
    top_probs: [...top.map((t) => ({ id: t.id, prob: Math.exp(t.logprob) })), { id: 63, prob: 0 }] }] };
  const r = parseLlamaCppCompletion(body, { nPredict: 1, nProbs: 20, ignoreEos: true });
  assert.equal(r.steps[0]!.top.length, 20);
  for (const [j, t] of r.steps[0]!.top.entries()) assert.ok(Math.abs(t.logprob - top[j]!.logprob) < 1e-9);
  // llama.cpp's log(0): the float's lowest value
  const lowest = { tokens: [5], completion_probabilities: [{ id: 5, logprob: 0, top_logprobs: [{ id: 5, logprob: 0 }, { id: 6, logprob: -3.4028234663852886e38 }] }] };
  assert.deepEqual(parseLlamaCppCompletion(lowest, { nPredict: 1, nProbs: 2, ignoreEos: true }).steps[0]!.top, [{ tokenId: 5, logprob: 0 }]);
});

test('a response lacking a field the dump needs is refused, naming the field', async () => {
  const good = (body: Record<string, unknown>) => llamaCppResponse(body, toySteps(body));
  const cases: [string, (body: Record<string, unknown>) => unknown, RegExp][] = [
    ['no completion_probabilities', (b) => ({ ...good(b), completion_probabilities: undefined }), /prompt a: .*completion_probabilities is missing/],
    ['no tokens', (b) => ({ ...good(b), tokens: undefined }), /prompt a: .*tokens is missing \(was return_tokens sent/],
    ['no top_logprobs', (b) => {
      const r = good(b);
      (r.completion_probabilities as Record<string, unknown>[])[2]!.top_logprobs = undefined;
      return r;
    }, /completion_probabilities\[2\]: top_logprobs is missing/],
    ['an entry without logprob', (b) => {
      const r = good(b);
      const top = (r.completion_probabilities as { top_logprobs: Record<string, unknown>[] }[])[1]!.top_logprobs;
      delete top[3]!.logprob;
      return r;
    }, /completion_probabilities\[1\] top_logprobs\[3\]: logprob is missing/],
    ['post-sampling probabilities of a greedy chain', (b) => {
      const r = good(b);
      for (const e of r.completion_probabilities as Record<string, unknown>[]) {
        delete e.top_logprobs;
        e.top_probs = [{ id: e.id, token: 'x', bytes: [120], prob: 1 }];
      }
      return r;
    }, /top_probs lists 1 of 20 requested entries: post-sampling probabilities/],
    ['tokens that are not the entries\' ids', (b) => {
      const r = good(b);
      (r.tokens as number[])[4] = ((r.tokens as number[])[4]! + 1) % VOCAB;
      return r;
    }, /completion_probabilities\[4\]: id is \d+ but tokens\[4\] is \d+/],
    ['fewer tokens than n_predict', (b) => llamaCppResponse(b, toySteps(b).slice(0, 3)), /tokens has 3 tokens, n_predict was 6 \(stop_type "eos"\)/],
    ['an HTTP error', () => ({ status: 400, body: { error: { code: 400, message: 'the request exceeds the available context size', type: 'exceed_context_size_error' } } }),
      /HTTP 400: the request exceeds the available context size/],
  ];
  for (const [what, answer, want] of cases) {
    const server = await startFakeLlamaServer(answer);
    try {
      await assert.rejects(dumpPeerReference({ url: server.url, prompts, encode }), want, what);
    } finally {
      await server.close();
    }
  }
  // nothing listening: the URL and the reason, not fetch's bare "fetch failed"
  const gone = await startFakeLlamaServer(() => ({}));
  await gone.close();
  await assert.rejects(dumpPeerReference({ url: gone.url, prompts, encode }), /cannot reach llama-server at http:\/\/127\.0\.0\.1:\d+\/completion: .*ECONNREFUSED/);
  // without ignore_eos, a generation that ended at EOS is a shorter but valid transcript
  const server = await startFakeLlamaServer((b) => llamaCppResponse(b, toySteps(b).slice(0, 3)));
  try {
    const dump = await dumpPeerReference({ url: server.url, prompts, encode, ignoreEos: false });
    assert.deepEqual(dump.prompts.map((p) => p.steps.length), [3, 3]);
    assert.equal(server.bodies[0]!.ignore_eos, false);
  } finally {
    await server.close();
  }
});

test('a reference file step without logits or top, or at a position past the greedy tokens, is refused', () => {
  const base = { prompt: [1, 2], greedy: [3, 4] };
  assert.throws(() => readReferenceFile({ prompts: [{ ...base, steps: [{ position: 2 }] }] }, 'r.json'),
    /r.json: prompt p0 step 0: carries neither logits nor a non-empty top list/);
  assert.throws(() => readReferenceFile({ prompts: [{ ...base, steps: [{ position: 5, top: [{ tokenId: 1, logprob: -1 }] }] }] }, 'r.json'),
    /position 5 is not within prompt \+ greedy/);
  const tools = readReferenceFile({ prompts: [{ ...base, steps: [{ position: 2, logits: [0, 1] }, { position: 3, logits: [1, 0] }] }] }, 'r.json');
  assert.deepEqual(tools.prefixes[0]!.steps, [[1, 2], [1, 2, 3]]);
  assert.deepEqual(tools.reference.prompts[0]!.steps[1], { logits: [1, 0] });
});

test('a token ending inside a UTF-8 character has no entry: the others are placed by the tokenizer\'s pieces', () => {
  // 10 and 11 are ASCII, 60 is the lead byte of "é" (C3 A9) and 61 its continuation
  const pieces: Record<number, number[]> = { 10: [0x61], 11: [0x62], 60: [0xc3], 61: [0xa9] };
  const piece = (id: number) => Uint8Array.from(pieces[id]!);
  assert.equal(utf8CompleteLength(Uint8Array.from([0x61, 0xc3])), 1);
  assert.equal(utf8CompleteLength(Uint8Array.from([0x61, 0xc3, 0xa9])), 3);
  const tokens = [10, 60, 61, 11];
  assert.deepEqual(llamaCppListedSteps(tokens, piece).map((l) => [l.index, [...l.bytes]]), [[0, [0x61]], [2, [0xc3, 0xa9]], [3, [0x62]]]);
  // what llama-server sends: no entry for 60, and 61's carries the whole character
  const entry = (id: number, bytes: number[]) => ({ id, token: 'x', bytes, logprob: -0.5,
    top_logprobs: [{ id, token: 'x', bytes, logprob: -0.5 }, { id: 12, token: 'c', bytes: [0x63], logprob: -1.5 }] });
  const body = { tokens, stop_type: 'limit', completion_probabilities: [entry(10, [0x61]), entry(61, [0xc3, 0xa9]), entry(11, [0x62])] };
  const r = parseLlamaCppCompletion(body, { nPredict: 4, nProbs: 2, ignoreEos: true, piece });
  assert.deepEqual(r.greedy, tokens);
  assert.deepEqual(r.steps.map((st) => st.index), [0, 2, 3]);
  assert.deepEqual(r.unlisted, [1]);
  assert.throws(() => parseLlamaCppCompletion(body, { nPredict: 4, nProbs: 2, ignoreEos: true }),
    /completion_probabilities has 3 entries for 4 tokens \(llama-server lists no token that ends inside a UTF-8 character/);
  // pieces that disagree with the server's bytes are refused, not guessed around
  const wrong = (id: number) => Uint8Array.from(id === 61 ? [0xa9, 0x20] : pieces[id]!);
  assert.throws(() => parseLlamaCppCompletion(body, { nPredict: 4, nProbs: 2, ignoreEos: true, piece: wrong }),
    /completion_probabilities\[1\]: bytes are \[195,169\], the tokenizer's pieces since the last entry give \[195,169,32\]/);
  // the reference file keeps each listed step at its own position
  const file = { prompts: [{ id: 'u', prompt: [1, 2], greedy: r.greedy, steps: r.steps.map((st) => ({ position: 2 + st.index, top: st.top.map((t) => t) })) }] };
  assert.deepEqual(readReferenceFile(file, 'u.json').prefixes[0]!.steps, [[1, 2], [1, 2, 10, 60], [1, 2, 10, 60, 61]]);
});
