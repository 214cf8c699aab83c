// Random streams of arrivals, steps (alone, or two at once as async scheduling runs them), aborts and
// finishes over small page pools.
// A fake KV store records what each slot was written with (salt + the whole
// token prefix up to that position), written in batch order as the forward
// pass does, so a page handed to two writers, or a prefix hit on the wrong (or
// never written) page, shows up as a wrong label. With several KV cache groups
// every attention group writes its own pages, and a recurrent group's state
// slot (its own ids, not pages) holds the label of the last position folded
// into the state: a row must find there the state its first position
// continues from.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { KVCacheManager } from '../../src/kv/kv-cache-manager.js';
import type { KVCacheGroup } from '../../src/kv/kv-cache-spec.js';
import { Request } from '../../src/scheduler/request.js';
import { Scheduler, type SchedulerOptions } from '../../src/scheduler/scheduler.js';
import { rowSlots } from './helpers.js';

type Op =
  | { kind: 'arrive'; promptLen: number; maxTokens: number; priority: number; prefix: number; salt: string | null;
    promptLogits: boolean }
  | { kind: 'step' }
  | { kind: 'ahead' }
  | { kind: 'abort' | 'finish'; pick: number };

const opArb: fc.Arbitrary<Op> = fc.oneof(
  { weight: 3, arbitrary: fc.record({ kind: fc.constant('arrive' as const), promptLen: fc.integer({ min: 1, max: 14 }),
    maxTokens: fc.integer({ min: 1, max: 8 }), priority: fc.integer({ min: 0, max: 3 }),
    prefix: fc.integer({ min: 0, max: 2 }), salt: fc.constantFrom(null, 's'), promptLogits: fc.boolean() }) },
  { weight: 4, arbitrary: fc.constant({ kind: 'step' as const }) },
  { weight: 3, arbitrary: fc.constant({ kind: 'ahead' as const }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constantFrom('abort' as const, 'finish' as const), pick: fc.nat() }) },
);

const configArbWith = (maxNumBlocks: number) => fc.record({
  blockSize: fc.constantFrom(1, 2, 4),
  numBlocks: fc.integer({ min: 4, max: maxNumBlocks }),
  maxNumBatchedTokens: fc.integer({ min: 1, max: 16 }),
  maxNumSeqs: fc.integer({ min: 1, max: 5 }),
  policy: fc.constantFrom('fcfs' as const, 'priority' as const),
  stepPolicy: fc.constantFrom('decode-first' as const, 'prefill-first' as const, 'decode-shape-stable' as const),
  longPrefillTokenThreshold: fc.constantFrom(0, 3),
  enableChunkedPrefill: fc.boolean(),
  enablePrefixCaching: fc.boolean(),
  maxPromptLogitRows: fc.integer({ min: 1, max: 6 }),
});
const configArb = configArbWith(14);

const full = (numKvHeads: number): KVCacheGroup['spec'] => ({ kind: 'full_attention', numKvHeads, headDim: 64 });
const recurrent: KVCacheGroup['spec'] = { kind: 'recurrent', stateBytes: 4096 };
const groupsArb = fc.constantFrom<KVCacheGroup[]>(
  [{ spec: full(8), layers: [0] }, { spec: full(2), layers: [1] }],
  [{ spec: full(8), layers: [1] }, { spec: recurrent, layers: [0, 2] }],
  [{ spec: recurrent, layers: [0] }, { spec: full(8), layers: [1] }, { spec: full(2), layers: [2] }],
);

const PREFIXES = [0, 1, 2].map((k) => Array.from({ length: 14 }, (_, j) => 10 * k + (j % 3)));
const label = (r: Request, pos: number) => `${r.cacheSalt}|${r.allTokenIds.slice(0, pos + 1).join(',')}`;

function checkPages(kv: KVCacheManager, sched: Scheduler, kinds: readonly string[]): void {
  const owners = new Array<number>(kv.numBlocks).fill(0);
  assert.deepEqual(new Set(kv.requestIds()), new Set(sched.running.map((r) => r.requestId)));
  const slots = sched.running.map((r) => kv.stateSlot(r.requestId)).filter((slot) => slot >= 0);
  assert.equal(new Set(slots).size, slots.length, 'a state slot held twice');
  if (kv.hasStateSlots) {
    assert.equal(slots.length, sched.running.length, 'a running request without a state slot');
    assert.equal(kv.numFreeStateSlots + slots.length, kv.numStateSlots, 'state slots leaked');
  }
  for (const id of kv.requestIds()) {
    for (const [g, table] of kv.blockTables(id).entries()) {
      if (kinds[g] === 'recurrent') continue;
      assert.equal(new Set(table).size, table.length, 'a page twice in one table');
      for (const b of table) owners[b]!++;
    }
  }
  assert.equal(owners[0], 0, 'null block handed out');
  for (let b = 1; b < kv.numBlocks; b++) {
    const block = kv.pool.block(b);
    assert.equal(block.refCount, owners[b], `page ${b} refCount`);
    if (owners[b]! > 1) assert.notEqual(block.blockHash, null, `page ${b} shared but not a cached full page`);
  }
  const free = kv.pool.freeBlockIds();
  assert.equal(free.length, kv.numFreeBlocks);
  assert.deepEqual(new Set(free), new Set(owners.flatMap((n, b) => (b > 0 && n === 0 ? [b] : []))));
}

type Config = typeof configArb extends fc.Arbitrary<infer T> ? T : never;

/**
 * With `spec`, each synchronous step first gives decoding requests proposals (as the engine's proposer, never past
 * max_tokens) and the fake verifier accepts a prefix of them: rejected positions roll back (pages freed), and the
 * KV labels below are written from the tokens the step fed, proposals included.
 */
function runStream(cfg: Config, ops: Op[], groups?: KVCacheGroup[], numStateSlots = cfg.maxNumSeqs, spec = 0): void {
  const { blockSize, numBlocks, enablePrefixCaching, ...rest } = cfg;
  const kv = new KVCacheManager({ numBlocks, blockSize, enablePrefixCaching, ...(groups ? { groups } : {}), numStateSlots });
  const kinds = groups?.map((g) => g.spec.kind) ?? ['full_attention'];
  const options: SchedulerOptions = { ...rest, blockSize };
  const sched = new Scheduler(options, kv);
  const store = new Map<number, string>();
  const live: string[] = [];
  let numArrived = 0;
  // prompt positions each prompt-logits request has had logits rows for, and whether it has had its first token
  const logitPositions = new Map<string, number[]>();
  const hadFirstToken = new Set<string>();

  // schedule a step: check its rows, and return its KV writes (run as the device would) and its tokens
  const schedule = (propose = false) => {
    if (propose) {
      for (const req of sched.running) {
        const room = Math.min(spec, req.maxTokens - req.numOutputTokens - 1);
        req.specTokenIds = req.isDecoding && room > 0
          ? Array.from({ length: 1 + ((req.numTokens + numArrived) % room) }, (_, j) => (req.numTokens + j) % 4) : [];
      }
    }
    const hashedBefore = new Set<number>();
    for (let b = 1; b < numBlocks; b++) if (kv.pool.block(b).blockHash !== null) hashedBefore.add(b);
    const out = sched.schedule();
    const writerOf = new Map<number, string>();
    const allocatedNow = new Set(out.scheduledRequests.flatMap((r) => r.newBlockIds));
    // A page handed out afresh holds garbage until written.
    for (const page of allocatedNow) for (let o = 0; o < blockSize; o++) store.delete(page * blockSize + o);
    // so does the state slot of a request admitted (or resumed) this step
    for (const r of out.scheduledRequests) if (r.isNewlyAdmitted && r.stateSlot !== undefined) store.delete(-(r.stateSlot + 1));
    assert.ok(out.numScheduledTokensTotal <= cfg.maxNumBatchedTokens, 'token budget exceeded');
    assert.equal(out.numScheduledTokensTotal, out.scheduledRequests.reduce((a, r) => a + r.numScheduledTokens, 0));
    assert.ok(out.scheduledRequests.length <= cfg.maxNumSeqs && sched.numRunning <= cfg.maxNumSeqs, 'maxNumSeqs exceeded');
    if (out.preemptedRequestIds.length > 0) assert.ok(!out.scheduledRequests.some((r) => r.isNewlyAdmitted));
    const sampled = new Map<string, number[]>();
    let numLogitRows = 0;
    for (const row of out.scheduledRequests) {
      const req = sched.getRequest(row.requestId)!;
      assert.ok(row.numScheduledTokens >= 1);
      if (row.promptLogitsTo > row.promptLogitsFrom) {
        const seen = logitPositions.get(row.requestId);
        assert.ok(seen !== undefined, `${row.requestId} did not ask for prompt logits`);
        assert.ok(row.promptLogitsFrom >= row.startPosition && row.promptLogitsTo <= row.seqLen, 'logit rows outside the chunk');
        assert.ok(row.promptLogitsTo <= req.numPromptTokens - 1, 'logit rows beyond the prompt');
        for (let p = row.promptLogitsFrom; p < row.promptLogitsTo; p++) {
          assert.ok(!seen.includes(p), `${row.requestId}: logits of prompt position ${p} twice`);
          seen.push(p);
        }
        numLogitRows += row.promptLogitsTo - row.promptLogitsFrom;
      }
      if (cfg.longPrefillTokenThreshold > 0) assert.ok(row.numScheduledTokens <= cfg.longPrefillTokenThreshold);
      assert.deepEqual(row.blockTable, row.blockTables[kv.pagedGroup], 'blockTable is the first full-attention group\'s');
      assert.equal(row.blockTables.length, kinds.length);
      // a state slot s is keyed -(s + 1): its own ids, apart from the pages'
      const pages = kinds.flatMap((kind, g) => (kind === 'recurrent' ? [-(row.blockTables[g]![0]! + 1)]
        : rowSlots({ ...row, blockTable: row.blockTables[g]! }, blockSize).slots.map((slot) => Math.floor(slot / blockSize))));
      for (const page of pages) {
        assert.equal(writerOf.get(page) ?? row.requestId, row.requestId, `page ${page} has two writers`);
        writerOf.set(page, row.requestId);
        assert.ok(!hashedBefore.has(page) || allocatedNow.has(page), `cached page ${page} written again`);
      }
      kinds.forEach((kind, g) => {
        if (kind !== 'recurrent') return;
        assert.equal(row.blockTables[g]!.length, 1, 'one state slot a request');
        assert.equal(row.stateSlot, row.blockTables[g]![0], 'the row\'s state slot is its recurrent group\'s');
      });
      assert.ok(row.specTokenIds.length === 0 || (spec > 0 && row.isDecode && row.sample), 'proposals on a row that cannot verify them');
      assert.deepEqual(row.tokenIds.slice(row.tokenIds.length - row.specTokenIds.length), row.specTokenIds);
      // a verify row keeps a prefix of its proposals (how many: any, from the step), then the target's token
      const numKept = row.specTokenIds.length === 0 ? 0 : (row.seqLen + numArrived) % (row.specTokenIds.length + 1);
      if (row.sample) sampled.set(row.requestId, [...row.specTokenIds.slice(0, numKept), (row.seqLen * 3 + (req.promptTokenIds[0]! % 4)) % 4]);
    }
    assert.ok(numLogitRows <= cfg.maxPromptLogitRows, `${numLogitRows} prompt logit rows in a step`);
    // labels from the tokens as they are when the step runs (a token scheduled ahead is known by then)
    const write = () => {
      for (const row of out.scheduledRequests) {
        const req = sched.getRequest(row.requestId);
        if (!req) continue;
        kinds.forEach((kind, g) => {
          const table = row.blockTables[g]!;
          if (kind === 'recurrent') {
            const slot = -(table[0]! + 1);
            if (row.startPosition > 0) {
              assert.equal(store.get(slot), label(req, row.startPosition - 1), `${req.requestId} continues a wrong state`);
            }
            store.set(slot, label(req, row.seqLen - 1));
            return;
          }
          const { positions, slots } = rowSlots({ ...row, blockTable: table }, blockSize);
          // a proposal's position is labelled with the proposed tokens (what the forward computes there)
          const fed = [...req.allTokenIds.slice(0, row.seqLen - row.specTokenIds.length), ...row.specTokenIds];
          slots.forEach((slot, j) => store.set(slot, `${req.cacheSalt}|${fed.slice(0, positions[j]! + 1).join(',')}`));
        });
      }
    };
    return { out, sampled, write };
  };
  const complete = ({ out, sampled }: ReturnType<typeof schedule>, checkReads: boolean) => {
    if (out.scheduledRequests.length > 0) sched.updateFromOutput(sampled);
    for (const id of sampled.keys()) {
      const seen = logitPositions.get(id);
      const req = sched.getRequest(id);
      if (seen === undefined || req === undefined || hadFirstToken.has(id)) continue;
      hadFirstToken.add(id);
      assert.deepEqual([...seen].sort((a, b) => a - b), Array.from({ length: req.numPromptTokens - 1 }, (_, p) => p),
        `${id}: its first token came before every prompt position's logits`);
    }
    const done = [...sampled.keys()].filter((id) => {
      const req = sched.getRequest(id);
      return req !== undefined && req.numSampledOutputTokens >= req.maxTokens;
    });
    sched.finishRequests(done, 'FINISHED_LENGTH');
    if (!checkReads) return;
    for (const req of sched.running) {
      // rejected proposals' pages went back: a running request holds the pages of its computed tokens only
      if (spec > 0) assert.equal(kv.blockTable(req.requestId).length, Math.ceil(req.numComputedTokens / blockSize), `${req.requestId} kept a rolled-back page`);
      kv.blockTables(req.requestId).forEach((table, g) => {
        if (kinds[g] === 'recurrent') {
          assert.equal(store.get(-(table[0]! + 1)), label(req, req.numComputedTokens - 1),
            `request ${req.requestId} holds a wrong state`);
          return;
        }
        for (let p = 0; p < req.numComputedTokens; p++) {
          const slot = table[Math.floor(p / blockSize)]! * blockSize + (p % blockSize);
          assert.equal(store.get(slot), label(req, p), `request ${req.requestId} reads a wrong KV at ${p}`);
        }
      });
    }
  };
  const doStep = () => {
    const s = schedule(spec > 0);
    s.write();
    complete(s, true);
  };
  // async scheduling: the next step is scheduled before this one's tokens come back
  const doStepAhead = () => {
    const a = schedule();
    a.write();
    const b = schedule();
    complete(a, false);
    b.write();
    complete(b, true);
  };

  for (const op of ops) {
    if (op.kind === 'arrive') {
      const fits = kv.maxNumBlocksPerGroup(op.promptLen + op.maxTokens).reduce((a, n) => a + n, 0) <= numBlocks - 1;
      if (!fits || (!cfg.enableChunkedPrefill && op.promptLen > cfg.maxNumBatchedTokens)) continue;
      const id = `r${numArrived}`;
      sched.addRequest(new Request({ requestId: id, promptTokenIds: PREFIXES[op.prefix]!.slice(0, op.promptLen),
        maxTokens: op.maxTokens, priority: op.priority, arrivalTime: numArrived++, cacheSalt: op.salt,
        promptLogits: op.promptLogits }));
      if (op.promptLogits) logitPositions.set(id, []);
      live.push(id);
    } else if (op.kind === 'step') {
      doStep();
    } else if (op.kind === 'ahead') {
      doStepAhead();
    } else if (live.length > 0) {
      const id = live.splice(op.pick % live.length, 1)[0]!;
      if (op.kind === 'abort') sched.abortRequest(id);
      else sched.finishRequests([id], 'FINISHED_STOPPED');
    }
    checkPages(kv, sched, kinds);
  }
  for (let n = 0; sched.hasUnfinishedRequests(); n++) {
    assert.ok(n < 2000, 'requests never finished');
    doStep();
    checkPages(kv, sched, kinds);
  }
  assert.equal(kv.numFreeBlocks, numBlocks - 1, 'leaked pages');
  assert.equal(kv.numFreeStateSlots, kv.numStateSlots, 'leaked state slots');
  for (let b = 1; b < numBlocks; b++) assert.equal(kv.pool.block(b).refCount, 0);
}

const run = (cfg: Config, ops: Op[]) => runStream(cfg, ops);

test('random request streams: one writer per page, exact ref counts, budgets held, no leak, all finish; prompt ' +
  'logits of every position once, before the first token, within the rows a step allows', () => {
  fc.assert(fc.property(configArb, fc.array(opArb, { maxLength: 80 }), run), { numRuns: 1000 });
});

test('the same streams over two and three KV cache groups (full attention of two shapes, recurrent states): a ' +
  'page or state slot to one writer, every group\'s pages and slots freed, states continued from the right slot', () => {
  // state slots from 1 (admission waits for one) to more than maxNumSeqs
  fc.assert(fc.property(configArbWith(24), fc.array(opArb, { maxLength: 80 }), groupsArb, fc.integer({ min: 1, max: 6 }),
    (cfg, ops, groups, numStateSlots) => runStream(cfg, ops, groups, numStateSlots)), { numRuns: 1000 });
});

test('the same streams with speculative decoding: proposals fed after the last token, a prefix of them kept; the KV '
  + 'of the rest rolled back and its pages freed, every computed position holding what its tokens say, no leak', () => {
  fc.assert(fc.property(configArb, fc.array(opArb, { maxLength: 80 }), fc.integer({ min: 1, max: 4 }),
    fc.constantFrom<KVCacheGroup[] | undefined>(undefined, [{ spec: full(8), layers: [0] }, { spec: full(2), layers: [1] }]),
    (cfg, ops, k, groups) => runStream(cfg, ops, groups, cfg.maxNumSeqs, k)), { numRuns: 1000 });
});
