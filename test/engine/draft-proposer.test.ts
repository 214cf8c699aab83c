// The draft proposer's bookkeeping against a fake draft model that records each forward and answers "the input token
// plus one": which positions each forward feeds, that it reuses what it computed where the target accepted it, that a
// preemption or a failed forward makes it start over, and that proposals stop short of the draft's context.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { ForwardBatch } from '../../src/backend/batch.js';
import type { Model } from '../../src/model/model.js';
import { DraftProposer, type DraftRow } from '../../src/engine/spec/draft-proposer.js';
import { SpecDecoding } from '../../src/engine/spec/spec-decode.js';
import { Request } from '../../src/scheduler/request.js';
import { defaultSamplingParams } from '../../src/sampling/params.js';
import { SequenceSamplingState } from '../../src/sampling/sequence-state.js';
import { Rng } from '../../src/backend/sampling/rng.js';

const V = 1000;
const BLOCK = 4;

/**
 * Records every forward's (start, tokens, sampled) per row; answers token + 1 at each logits row, a negative input
 * id -(r + 1) standing for the token it answered last at row r (as the backends read them).
 */
function fakeModel(failAt = -1): { model: Model; calls: { start: number; tokens: number[]; sample: boolean }[][] } {
  const calls: { start: number; tokens: number[]; sample: boolean }[][] = [];
  let last = new Int32Array(0);
  const forwardTokens = (b: ForwardBatch): Int32Array => {
    if (calls.length === failAt) {
      calls.push([]);
      throw new Error('injected');
    }
    const rows = [];
    const sampled = new Set(Array.from(b.logitsIndices));
    for (let i = 0; i < b.numSeqs; i++) {
      const [from, to] = [b.queryStartLoc[i]!, b.queryStartLoc[i + 1]!];
      rows.push({ start: b.positions[from]!, tokens: Array.from(b.inputIds.subarray(from, to)), sample: sampled.has(to - 1) });
    }
    calls.push(rows);
    const input = (t: number) => (b.inputIds[t]! < 0 ? last[-b.inputIds[t]! - 1]! : b.inputIds[t]!);
    last = Int32Array.from(b.logitsIndices, (t) => (input(t) + 1) % V);
    return last;
  };
  const model = { forwardTokens, forwardTokensAsync: (b: ForwardBatch) => {
    const ids = forwardTokens(b);
    return () => ids;
  } } as unknown as Model;
  return { model, calls };
}

function request(tokens: number[]): Request {
  const req = new Request({ requestId: 'r', promptTokenIds: tokens, maxTokens: 100,
    sampling: new SequenceSamplingState({ ...defaultSamplingParams(), temperature: 0 }, [], new Rng(0)) });
  return req;
}

/** The row the scheduler would make for `req` with k placeholders (its pages: enough for seqLen). */
function row(req: Request, k: number): DraftRow {
  const n = req.numTokens;
  const seqLen = n + k;
  return { req, blockTable: Array.from({ length: Math.ceil(seqLen / BLOCK) }, (_, i) => i + 1),
    specTokenIds: new Array<number>(k).fill(0), tokenIds: [req.allTokenIds[n - 1]!, ...new Array<number>(k).fill(0)], seqLen };
}

test('a draft catches up on what it has not seen (two tokens a row once it runs), proposes k tokens one forward each, and reuses what the target accepted', () => {
  const { model, calls } = fakeModel();
  const drafter = new DraftProposer(model, BLOCK, 4096, 3, undefined, false);
  const req = request([10, 11, 12, 13, 14]);
  const r1 = row(req, 3);
  drafter.fill([r1]);
  assert.deepEqual(r1.specTokenIds, [15, 16, 17]);
  assert.deepEqual(r1.tokenIds, [14, 15, 16, 17], 'the scheduled tokens end with the proposals');
  // catch-up of 5 tokens at a budget of 3 a forward: 3 without logits, then 2 with; then d1 fed at 5, d2 at 6 (d3,
  // the last, is not fed)
  assert.deepEqual(calls, [[{ start: 0, tokens: [10, 11, 12], sample: false }], [{ start: 3, tokens: [13, 14], sample: true }],
    [{ start: 5, tokens: [15], sample: true }], [{ start: 6, tokens: [16], sample: true }]]);
  // the target accepted 15 and then picked 99: the draft's KV of 15 (position 5) stands and 99 at 6 is new; the
  // catch-up recomputes 15 too, so that it is two tokens as every catch-up
  req.appendTokens([15, 99]);
  calls.length = 0;
  const r2 = row(req, 2);
  drafter.fill([r2]);
  assert.deepEqual(calls[0], [{ start: 5, tokens: [15, 99], sample: true }]);
  assert.deepEqual(r2.specTokenIds, [100, 101]);
  // everything accepted (2 of 2) plus the target's token: the draft computed 100 at 7, not 101 at 8; 101 and 5 are new
  req.appendTokens([100, 101, 5]);
  calls.length = 0;
  drafter.fill([row(req, 1)]);
  assert.deepEqual(calls, [[{ start: 8, tokens: [101, 5], sample: true }]], 'k = 1: the catch-up alone proposes');
  // a preemption gave the pages back: start over from position 0
  req.numPreemptions++;
  calls.length = 0;
  drafter.fill([row(req, 1)]);
  assert.equal(calls[0]![0]!.start, 0);
});

test('chained (QUIRE_DRAFT_CHAIN): proposal forwards read the token before on the device; the same proposals', () => {
  const { model, calls } = fakeModel();
  const drafter = new DraftProposer(model, BLOCK, 4096, 64, undefined, true);
  const [a, b] = [request([10, 11, 12]), request([20, 21, 22])];
  const [ra, rb] = [row(a, 4), row(b, 2)];
  drafter.fill([ra, rb]);
  assert.deepEqual(ra.specTokenIds, [13, 14, 15, 16]);
  assert.deepEqual(rb.specTokenIds, [23, 24]);
  // d1 from the catch-up comes through the host; then row 0 (a) reads its last token at row 0 of the forward before
  assert.deepEqual(calls.slice(1).map((c) => c.map((r) => r.tokens[0])), [[13, 23], [-1], [-1]]);
});

test('a failed draft forward falls back to the last token, is counted, and leaves the draft to recompute', () => {
  const { model, calls } = fakeModel(1);
  const drafter = new DraftProposer(model, BLOCK, 4096, 64);
  const req = request([1, 2, 3]);
  const r = row(req, 3);
  drafter.fill([r]);
  assert.deepEqual(r.specTokenIds, [4, 3, 3], 'd1 came from the catch-up; the second forward failed');
  assert.equal(drafter.numFailures, 1);
  req.appendTokens([4, 7]);
  calls.length = 0;
  drafter.fill([row(req, 1)]);
  // d1 was never fed back: the draft computed positions < 3, so it catches up from 3
  assert.deepEqual(calls[0], [{ start: 3, tokens: [4, 7], sample: true }]);
});

test('a draft model\'s proposals are placeholders until fill, none past max_tokens or the draft\'s context', () => {
  const { model } = fakeModel();
  const spec = new SpecDecoding({ method: 'draft_model', model: '/d', numSpeculativeTokens: 4 }, new DraftProposer(model, BLOCK, 8, 64));
  const decoding = (n: number, maxTokens: number) => {
    const req = new Request({ requestId: `r${n}`, promptTokenIds: Array.from({ length: n }, (_, i) => i), maxTokens,
      sampling: new SequenceSamplingState({ ...defaultSamplingParams(), temperature: 0 }, [], new Rng(0)) });
    req.status = 'RUNNING';
    req.appendTokens([n]);
    req.numComputedTokens = req.numTokens - 1;
    return req as Request<SequenceSamplingState>;
  };
  const [free, nearEnd, nearMax] = [decoding(3, 100), decoding(6, 100), decoding(2, 3)];
  spec.propose([free, nearEnd, nearMax]);
  assert.deepEqual(free.specTokenIds, [3, 3, 3, 3], '4 tokens: 4 placeholders, the last token');
  // 7 tokens, a context of 8: proposals 1 .. k-1 are fed at positions 7 .. 7+k-2 < 8, so k <= 2
  assert.equal(nearEnd.specTokenIds.length, 2);
  assert.equal(nearMax.specTokenIds.length, 1, 'max_tokens 3, 1 out: room for the verified token and 1 proposal');
  assert.throws(() => new SpecDecoding({ method: 'draft_model', model: '/d', numSpeculativeTokens: 2 }), /draft_model with a missing proposer/);
});
