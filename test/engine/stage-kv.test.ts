// The KV cache of pipeline stages (engine/tp/stage-kv.ts): each stage's pages hold its own layers, so the pages a
// budget holds grow with the stages; the engine takes the fewest pages any stage holds, and the fewest state slots any
// stage that keeps states holds (a stage of DeltaNet layers alone has no pages to give them up to); a stage whose
// budget holds nothing is named.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { planKvCache } from '../../src/engine/backend-factory.js';
import { planStageKv } from '../../src/engine/tp/stage-kv.js';
import { groupLayerSpecs, type KVCacheSpec } from '../../src/kv/kv-cache-spec.js';

const attention: KVCacheSpec = { kind: 'full_attention', numKvHeads: 2, headDim: 8 };
const recurrent: KVCacheSpec = { kind: 'recurrent', stateBytes: 1000 };
const layers = (...specs: KVCacheSpec[]) => groupLayerSpecs(specs);
// a page of one attention layer: K and V of 4 tokens x 2 heads x 8, 2 bytes an element
const PAGE = 2 * 4 * 2 * 8 * 2;
const o = { blockSize: 4, kvBytesPerElement: 2, maxNumSeqs: 4, enablePrefixCaching: false, cachedStateSlots: null, specBackupSlots: false };

test('a dense model over stages: each stage\'s pages of its layers alone, the fewest of them the engine\'s', () => {
  const budget = 100 * PAGE;
  const whole = planKvCache(layers(attention, attention, attention, attention, attention), { ...o, budgetBytes: budget });
  assert.equal(whole.numBlocks, 20);
  // 3 + 2 layers: the stage of 3 holds 33 pages, the other 50; each device holds more tokens than one device did
  const plan = planStageKv([{ groups: layers(attention, attention, attention), budgetBytes: budget },
    { groups: layers(attention, attention), budgetBytes: budget }], o);
  assert.deepEqual(plan, { numBlocks: 33, numStateSlots: 0, numCachedStateSlots: 0, numSpecBackupSlots: 0,
    bytesPerStateSlot: 0, bytesPerBlock: 5 * PAGE });
  // a stage whose device has less left (its embedding, a draft model's pages) holds fewer
  assert.equal(planStageKv([{ groups: layers(attention, attention), budgetBytes: budget },
    { groups: layers(attention, attention), budgetBytes: budget, extraBytesPerBlock: 2 * PAGE }], o).numBlocks, 25);
});

test('a hybrid model: the fewest state slots any stage holds, then the pages with them taken; a stage of states alone', () => {
  // stage 0: DeltaNet alone (no pages), stage 1: attention and DeltaNet, stage 2: attention alone
  const stages = [
    { groups: layers(recurrent), budgetBytes: 10_000 },
    { groups: layers(attention, recurrent), budgetBytes: 4 * 1000 + 10 * PAGE },
    { groups: layers(attention), budgetBytes: 7 * PAGE },
  ];
  const plan = planStageKv(stages, o);
  assert.equal(plan.numStateSlots, 4);
  assert.equal(plan.numBlocks, 7);
  assert.equal(plan.bytesPerStateSlot, 2000);
  // stage 0's budget holds 3 states: every stage gets 3, and stage 1 the pages the fourth would have taken
  const fewer = planStageKv([{ ...stages[0]!, budgetBytes: 3500 }, stages[1]!, { ...stages[2]!, budgetBytes: 100 * PAGE }], o);
  assert.equal(fewer.numStateSlots, 3);
  assert.equal(fewer.numBlocks, Math.floor((4 * 1000 + 10 * PAGE - 3 * 1000) / PAGE));
  // prefix caching: saved states as many again where they fit (stage 1: 4 + 4); stage 0's 6 slots hold 4 running and a
  // saved state for every 4 of them
  const cached = planStageKv([{ ...stages[0]!, budgetBytes: 6000 }, { ...stages[1]!, budgetBytes: 8000 + 10 * PAGE }, stages[2]!],
    { ...o, enablePrefixCaching: true });
  assert.deepEqual([cached.numStateSlots, cached.numCachedStateSlots], [4, 1]);
  const withStage0 = (budgetBytes: number) => planStageKv([{ ...stages[0]!, budgetBytes },
    { ...stages[1]!, budgetBytes: 8000 + 10 * PAGE }, stages[2]!], { ...o, enablePrefixCaching: true });
  const roomy = withStage0(8000);
  assert.deepEqual([roomy.numStateSlots, roomy.numCachedStateSlots], [4, 4]);
  // 4 slots: 3 running and the saved state the rounding up asks for
  const tight = withStage0(4000);
  assert.deepEqual([tight.numStateSlots, tight.numCachedStateSlots], [3, 1]);
});

test('a stage whose budget holds nothing is named', () => {
  assert.throws(() => planStageKv([{ groups: layers(recurrent), budgetBytes: 500 }, { groups: layers(attention), budgetBytes: 100 * PAGE }], o),
    /pipeline stage 0: its KV cache budget \(500 bytes\) holds no recurrent state slot of 1000 bytes/);
  assert.throws(() => planStageKv([{ groups: layers(attention), budgetBytes: 100 * PAGE }, { groups: layers(attention), budgetBytes: PAGE }], o),
    /pipeline stage 1: the KV cache budget \(256 bytes\) holds no page of 256 bytes/);
});
