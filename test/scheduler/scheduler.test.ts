import { test } from 'node:test';
import assert from 'node:assert/strict';
import { makeRequest, makeScheduler, rows, rowSlots, step } from './helpers.js';

test('a long prompt is chunked by the token budget; the last chunk samples; then one decode token per step', () => {
  const { sched } = makeScheduler({ maxNumBatchedTokens: 8 });
  const a = makeRequest('a', 20, 5);
  sched.addRequest(a);
  const s1 = step(sched);
  const r1 = s1.scheduledRequests[0]!;
  assert.deepEqual([r1.numScheduledTokens, r1.startPosition, r1.seqLen, r1.sample, r1.isPrefillChunk, r1.isDecode],
    [8, 0, 8, false, true, false]);
  assert.deepEqual(r1.tokenIds, a.promptTokenIds.slice(0, 8));
  assert.deepEqual(r1.blockTable, [1, 2]);
  assert.deepEqual(rowSlots(r1, 4), { positions: [0, 1, 2, 3, 4, 5, 6, 7], slots: [4, 5, 6, 7, 8, 9, 10, 11] });
  assert.equal(r1.isNewlyAdmitted, true);
  const r2 = step(sched).scheduledRequests[0]!;
  assert.deepEqual([r2.numScheduledTokens, r2.startPosition, r2.sample, r2.isNewlyAdmitted], [8, 8, false, false]);
  assert.deepEqual(r2.newBlockIds, [3, 4]);
  const r3 = step(sched).scheduledRequests[0]!;
  assert.deepEqual([r3.numScheduledTokens, r3.seqLen, r3.sample, r3.isPrefillChunk], [4, 20, true, false]);
  assert.deepEqual(r3.newBlockIds, [5]);
  assert.deepEqual(a.outputTokenIds, [7 * 20]);
  const r4 = step(sched).scheduledRequests[0]!;
  const { positions, slots } = rowSlots(r4, 4);
  assert.deepEqual([r4.tokenIds, positions, slots, r4.newBlockIds, r4.isDecode, r4.sample],
    [[140], [20], [24], [6], true, true]);
  assert.equal(a.numComputedTokens, 21);
});

test('decode rows go first, then waiting prompts take what is left of the budget', () => {
  const { sched } = makeScheduler({ maxNumBatchedTokens: 8 });
  sched.addRequest(makeRequest('a', 4, 10));
  step(sched);
  sched.addRequest(makeRequest('b', 10, 10));
  sched.addRequest(makeRequest('c', 10, 10));
  const out = step(sched);
  assert.deepEqual(rows(out), [['a', 1], ['b', 7]]);
  assert.equal(out.numScheduledTokensTotal, 8);
  assert.equal(sched.numWaiting, 1);
  assert.deepEqual(rows(step(sched)), [['a', 1], ['b', 3], ['c', 4]]);
});

test('maxNumSeqs caps the running set', () => {
  const { sched } = makeScheduler({ maxNumSeqs: 2 });
  for (const id of ['a', 'b', 'c']) sched.addRequest(makeRequest(id, 2, 3));
  assert.deepEqual(rows(step(sched)), [['a', 2], ['b', 2]]);
  assert.deepEqual([sched.numRunning, sched.numWaiting], [2, 1]);
});

test('fcfs admits in arrival order of submission; priority admits lower value first, then earlier arrival', () => {
  const order = (policy: 'fcfs' | 'priority') => {
    const { sched } = makeScheduler({ maxNumSeqs: 1, policy });
    sched.addRequest(makeRequest('p1', 2, 1, { priority: 1, arrivalTime: 0 }));
    sched.addRequest(makeRequest('late', 2, 1, { priority: 0, arrivalTime: 2 }));
    sched.addRequest(makeRequest('early', 2, 1, { priority: 0, arrivalTime: 1 }));
    const admitted: string[] = [];
    while (sched.hasUnfinishedRequests()) admitted.push(...step(sched).scheduledRequests.map((r) => r.requestId));
    return admitted;
  };
  assert.deepEqual(order('fcfs'), ['p1', 'late', 'early']);
  assert.deepEqual(order('priority'), ['early', 'late', 'p1']);
});

test('fcfs preempts the last running request by recompute, requeues it at the front, and admits nothing that step', () => {
  const { sched, kv } = makeScheduler({ numBlocks: 5 });
  const a = makeRequest('a', 8, 8);
  const b = makeRequest('b', 8, 8);
  sched.addRequest(a);
  sched.addRequest(b);
  step(sched);
  assert.equal(kv.numFreeBlocks, 0);
  sched.addRequest(makeRequest('c', 2, 1));
  const out = step(sched);
  assert.deepEqual(rows(out), [['a', 1]]);
  assert.deepEqual(out.preemptedRequestIds, ['b']);
  assert.deepEqual([b.status, b.numComputedTokens, b.numPreemptions], ['PREEMPTED', 0, 1]);
  assert.deepEqual(sched.waiting.map((r) => r.requestId), ['b', 'c']);
  assert.deepEqual(kv.blockTable('b'), []);
  assert.equal(kv.numFreeBlocks, 1);
  // c would fit in the free page but b heads the queue and needs 3 pages.
  assert.deepEqual(rows(step(sched)), [['a', 1]]);
  assert.equal(sched.numPreemptions, 1);
});

test('a preempted request resumes by recomputing prompt and outputs, then samples its next token', () => {
  const { sched } = makeScheduler({ numBlocks: 5 });
  const a = makeRequest('a', 8, 3);
  const b = makeRequest('b', 8, 3);
  sched.addRequest(a);
  sched.addRequest(b);
  step(sched);
  step(sched);
  assert.equal(b.status, 'PREEMPTED');
  const bOutputs = [...b.outputTokenIds];
  while (a.status === 'RUNNING') step(sched);
  const resumed = step(sched).scheduledRequests.find((r) => r.requestId === 'b')!;
  assert.deepEqual([resumed.startPosition, resumed.numScheduledTokens, resumed.sample, resumed.isDecode],
    [0, 9, true, false]);
  assert.deepEqual(resumed.tokenIds, [...b.promptTokenIds, ...bOutputs]);
  assert.equal(b.numOutputTokens, 2);
});

test('priority preempts the lowest-priority request, even one already scheduled this step, returning its budget', () => {
  const { sched, kv } = makeScheduler({ numBlocks: 7, policy: 'priority', maxNumBatchedTokens: 10 });
  const x = makeRequest('x', 7, 4, { priority: 5, arrivalTime: 0 });
  sched.addRequest(x);
  step(sched);
  sched.addRequest(makeRequest('y', 8, 4, { priority: 0, arrivalTime: 1 }));
  sched.addRequest(makeRequest('w', 16, 1, { priority: 1, arrivalTime: 2 }));
  assert.deepEqual(rows(step(sched)), [['x', 1], ['y', 8], ['w', 1]]);
  assert.equal(kv.numFreeBlocks, 1);
  // x (first) takes the last page; y then needs one and x is the victim: x's
  // token goes back to the budget, and w's chunk gets it.
  const out = step(sched);
  assert.deepEqual(rows(out), [['y', 1], ['w', 9]]);
  assert.deepEqual(out.preemptedRequestIds, ['x']);
  assert.equal(out.numScheduledTokensTotal, 10);
  assert.equal(x.status, 'PREEMPTED');
  assert.equal(kv.numFreeBlocks, 0);
});

test('pages a victim allocated in the step that preempted it are never hit: their KV was not written', () => {
  const { sched, kv } = makeScheduler({ numBlocks: 8, policy: 'priority', longPrefillTokenThreshold: 8,
    enablePrefixCaching: true });
  const x = makeRequest('x', 25, 1, { priority: 5 });
  sched.addRequest(x);
  step(sched);
  sched.addRequest(makeRequest('y', 4, 4, { priority: 0 }));
  assert.deepEqual(rows(step(sched)), [['x', 8], ['y', 4]]);
  const out = step(sched);
  assert.deepEqual([rows(out), out.preemptedRequestIds], [[['y', 1]], ['x']]);
  const again = makeRequest('x2', 0, 1, { tokens: [...x.promptTokenIds] });
  assert.equal(kv.getComputedBlocks(again).numCachedTokens, 16);
});

test('under priority, a request that is itself the lowest priority preempts itself', () => {
  const { sched } = makeScheduler({ numBlocks: 5, policy: 'priority' });
  const lo = makeRequest('lo', 7, 4, { priority: 9, arrivalTime: 0 });
  const hi = makeRequest('hi', 8, 4, { priority: 0, arrivalTime: 1 });
  sched.addRequest(lo);
  step(sched);
  sched.addRequest(hi);
  step(sched);
  const out = step(sched);
  assert.deepEqual(out.preemptedRequestIds, ['lo']);
  assert.deepEqual(rows(out), [['hi', 1]]);
});

test('abort and finish free every page at once and are reported in the next output', () => {
  const { sched, kv } = makeScheduler({ numBlocks: 9, maxNumBatchedTokens: 6 });
  sched.addRequest(makeRequest('a', 10, 5));
  sched.addRequest(makeRequest('b', 10, 5));
  step(sched);
  step(sched);
  sched.addRequest(makeRequest('c', 3, 5));
  assert.ok(kv.numFreeBlocks < 8);
  sched.abortRequest('a');
  sched.finishRequests(['b', 'c'], 'FINISHED_STOPPED');
  assert.equal(kv.numFreeBlocks, 8);
  assert.deepEqual([sched.numRunning, sched.numWaiting, sched.hasUnfinishedRequests()], [0, 0, false]);
  const out = sched.schedule();
  assert.deepEqual(out.finishedRequestIds, ['a', 'b', 'c']);
  assert.deepEqual(out.scheduledRequests, []);
  assert.throws(() => sched.updateFromOutput(new Map()), /without a scheduled step/);  // an empty step is not outstanding
  assert.deepEqual(sched.schedule().finishedRequestIds, []);
});

test('a prefix hit starts the first chunk after the cached tokens', () => {
  const { sched } = makeScheduler({ enablePrefixCaching: true });
  const shared = Array.from({ length: 9 }, (_, i) => 500 + i);
  sched.addRequest(makeRequest('a', 0, 4, { tokens: shared }));
  step(sched);
  const b = makeRequest('b', 0, 4, { tokens: [...shared.slice(0, 8), 1, 2, 3] });
  sched.addRequest(b);
  const rb = step(sched).scheduledRequests.find((r) => r.requestId === 'b')!;
  assert.deepEqual([rb.startPosition, rb.numScheduledTokens, rb.numCachedTokens, rb.isNewlyAdmitted], [8, 3, 8, true]);
  assert.deepEqual(rb.blockTable.slice(0, 2), [1, 2]);
  assert.equal(b.numCachedTokens, 8);
});

test('longPrefillTokenThreshold caps each prompt per step; chunked prefill off admits whole prompts only', () => {
  const capped = makeScheduler({ longPrefillTokenThreshold: 5 }).sched;
  capped.addRequest(makeRequest('a', 12, 2));
  capped.addRequest(makeRequest('b', 3, 2));
  assert.deepEqual(rows(step(capped)), [['a', 5], ['b', 3]]);

  const whole = makeScheduler({ maxNumBatchedTokens: 10, enableChunkedPrefill: false }).sched;
  whole.addRequest(makeRequest('a', 6, 3));
  whole.addRequest(makeRequest('b', 6, 3));
  assert.deepEqual(rows(step(whole)), [['a', 6]]);
  assert.deepEqual(rows(step(whole)), [['a', 1], ['b', 6]]);
  assert.throws(() => whole.addRequest(makeRequest('c', 11, 1)), /chunked prefill off/);
});

test('requests that could never fit, duplicate ids and out-of-order calls are refused', () => {
  const { sched } = makeScheduler({ numBlocks: 3 });
  assert.throws(() => sched.addRequest(makeRequest('big', 6, 3)), /may need 3 KV pages; the cache has 2/);
  sched.addRequest(makeRequest('a', 2, 2));
  assert.throws(() => sched.addRequest(makeRequest('a', 2, 2)), /duplicate/);
  sched.schedule();
  sched.schedule();  // one step ahead of the outstanding one (async scheduling)
  assert.throws(() => sched.schedule(), /schedule\(\) with 2 steps outstanding/);
  assert.throws(() => sched.updateFromOutput(new Map()), /0 sampled tokens, expected 1/);
});

test('options left undefined take their defaults', () => {
  const { sched } = makeScheduler({ policy: undefined, stepPolicy: undefined, enableChunkedPrefill: undefined,
    maxNumBatchedTokens: 4 });
  sched.addRequest(makeRequest('a', 6, 1, { priority: 3 }));
  sched.addRequest(makeRequest('b', 2, 1, { priority: 0 }));
  assert.deepEqual(rows(step(sched)), [['a', 4]]);
});

test('scheduled ahead: placeholders feed the next step, are filled in order, and are never hashed', () => {
  const { sched, kv } = makeScheduler({ enablePrefixCaching: true });
  const a = makeRequest('a', 3, 3);
  sched.addRequest(a);
  const first = sched.schedule();  // the prompt; its token is a placeholder for logits row 0
  assert.deepEqual([first.scheduledRequests[0]!.placeholderAt, a.allTokenIds[3], a.numPlaceholders], [3, -1, 1]);
  const second = sched.schedule();  // ahead: it feeds that placeholder, and completes page 0 with it
  assert.deepEqual(second.scheduledRequests[0]!.tokenIds, [-1]);
  assert.equal(a.numComputedTokens, 4);
  assert.equal(kv.getComputedBlocks(makeRequest('b', 0, 1, { tokens: [...a.promptTokenIds, -1, 9] })).numCachedTokens, 0,
    'a page holding a placeholder was registered in the prefix cache');
  sched.updateFromOutput(new Map([['a', [42]]]));
  sched.updateFromOutput(new Map([['a', [43]]]));
  assert.deepEqual([a.outputTokenIds, a.numPlaceholders], [[42, 43], 0]);
  step(sched);  // the next allocation registers page 0 under its real tokens
  const b = makeRequest('b', 0, 1, { tokens: [...a.promptTokenIds, 42, 9] });
  assert.equal(kv.getComputedBlocks(b).numCachedTokens, 4);
});

test('scheduled ahead: a request whose last token is already scheduled gets no further row', () => {
  const { sched } = makeScheduler();
  sched.addRequest(makeRequest('a', 3, 1));
  sched.addRequest(makeRequest('b', 3, 2));
  assert.deepEqual(rows(sched.schedule()), [['a', 3], ['b', 3]]);
  assert.deepEqual(rows(sched.schedule()), [['b', 1]]);
});

test('prompt logits: chunks of at most 64 positions by default, shared by the step\'s requests; others run beside them', () => {
  const { sched } = makeScheduler({ maxNumBatchedTokens: 512, numBlocks: 128, blockSize: 16 });
  sched.addRequest(makeRequest('a', 150, 2, { promptLogits: true }));
  sched.addRequest(makeRequest('b', 40, 2, { promptLogits: true }));
  sched.addRequest(makeRequest('c', 100, 2));
  const spans = (out: ReturnType<typeof step>) => out.scheduledRequests.map((r) =>
    [r.requestId, r.numScheduledTokens, r.promptLogitsTo - r.promptLogitsFrom]);
  assert.deepEqual(spans(step(sched)), [['a', 64, 64]], 'b waits (FCFS) until rows are left for it');
  assert.deepEqual(spans(step(sched)), [['a', 64, 64]]);
  assert.deepEqual(spans(step(sched)), [['a', 22, 21], ['b', 40, 39], ['c', 100, 0]]);
});

test('micro-batches (pipeline stages): each step a share of the requests, none awaiting its token, up to that many outstanding', () => {
  const { sched } = makeScheduler({ microBatches: 2 });
  for (const id of ['a', 'b', 'c', 'd']) sched.addRequest(makeRequest(id, 3, 5));
  // four requests, two micro-batches: two prompts a step, the next step the other two
  assert.deepEqual(rows(sched.schedule()), [['a', 3], ['b', 3]]);
  assert.deepEqual(rows(sched.schedule()), [['c', 3], ['d', 3]]);
  assert.throws(() => sched.schedule(), /schedule\(\) with 2 steps outstanding/);
  // the first step's tokens back: its requests decode, while the second's still wait for theirs
  sched.updateFromOutput(new Map([['a', [1]], ['b', [2]]]));
  assert.deepEqual(rows(sched.schedule()), [['a', 1], ['b', 1]]);
  sched.updateFromOutput(new Map([['c', [3]], ['d', [4]]]));
  assert.deepEqual(rows(sched.schedule()), [['c', 1], ['d', 1]]);
  assert.equal(sched.getRequest('c')!.allTokenIds.at(-2), 3, 'the token fed is the one that came back');
  // everything outstanding awaits its token: an empty step, which is not outstanding
  const { sched: one } = makeScheduler({ microBatches: 3 });
  one.addRequest(makeRequest('x', 2, 4));
  assert.deepEqual(rows(one.schedule()), [['x', 2]]);
  assert.deepEqual(rows(one.schedule()), []);
  one.updateFromOutput(new Map([['x', [9]]]));
  assert.deepEqual(rows(one.schedule()), [['x', 1]]);
});

test('micro-batches: a prompt chunk in flight takes its next chunk in the next step (its tokens are known)', () => {
  const { sched } = makeScheduler({ microBatches: 2, maxNumBatchedTokens: 4 });
  sched.addRequest(makeRequest('a', 10, 2));
  assert.deepEqual(rows(sched.schedule()), [['a', 4]]);
  assert.deepEqual(rows(sched.schedule()), [['a', 4]]);
  sched.updateFromOutput(new Map());
  const last = sched.schedule();
  assert.deepEqual([rows(last), last.scheduledRequests[0]!.sample], [[['a', 2]], true]);
});
