// The KV cache of a pipeline-parallel engine, sized over its stages. Each stage holds its own layers' pages and
// recurrent states (a hybrid model's) in what its device leaves after its profile run, and every stage holds the same
// page ids and state slots (the engine's one KVCacheManager hands them out), so the engine takes the fewest any stage
// can hold: first the state slots (each stage that keeps states lowers them to what its budget holds, as planKvCache
// does for one device), then, with those slots taken, the pages. A stage of few layers has small pages: the pages a
// device holds grow with -pp, which is what lets a long context fit where one device's cache could not.

import type { Backend } from '../../backend/backend.js';
import { bytesPerBlock, stateSlotBytes, type KVCacheGroup } from '../../kv/kv-cache-spec.js';
import type { Model } from '../../model/model.js';
import { planKvCache, RUNNING_PER_SAVED_STATE, type KvCachePlan } from '../backend-factory.js';
import { kvCacheGroupsOfSpecs } from '../kv-groups.js';
import type { ResolvedEngineOptions } from '../options.js';
import type { RankLeader } from './leader.js';

export interface StageKv {
  /** The stage's own layers' groups (kvCacheGroupsOfSpecs of its specs). */
  groups: KVCacheGroup[];
  budgetBytes: number;
  /** Bytes a page also takes on this stage's device (a draft model's K and V, on rank 0's: the last stage). */
  extraBytesPerBlock?: number;
}

export interface StagePlanOptions {
  blockSize: number;
  kvBytesPerElement: number;
  maxNumSeqs: number;
  enablePrefixCaching: boolean;
  cachedStateSlots: number | null;
  specBackupSlots: boolean;
}

const hasPages = (groups: readonly KVCacheGroup[]): boolean => groups.some((g) => g.spec.kind !== 'recurrent');

/** A stage of recurrent layers alone: the state slots its whole budget holds (planKvCache's rule, with no pages). */
function stateOnlySlots(s: StageKv, o: StagePlanOptions, stage: number): { slots: number; cached: number } {
  const per = stateSlotBytes(s.groups);
  const backups = o.specBackupSlots ? 1 : 0;
  const fixed = o.enablePrefixCaching ? o.cachedStateSlots : 0;
  const room = s.budgetBytes / per - (fixed ?? 0);  // slots besides the fixed saved ones
  // saved states (unless fixed) as many as the running ones where all fit, else one per RUNNING_PER_SAVED_STATE
  // running (planKvCache's rule)
  const all = o.maxNumSeqs * (1 + backups + (fixed === null ? 1 : 0)) <= room;
  const saved = (running: number): number => fixed ?? (all ? running : Math.ceil(running / RUNNING_PER_SAVED_STATE));
  const share = fixed !== null ? 0 : all ? 1 : 1 / RUNNING_PER_SAVED_STATE;
  let slots = Math.min(o.maxNumSeqs, Math.floor(room / (1 + backups + share)));
  if (fixed === null && slots * (1 + backups) + saved(slots) > room) slots--;  // the rounded-up saved slot
  if (slots < 1) {
    throw new Error(`pipeline stage ${stage}: its KV cache budget (${s.budgetBytes} bytes) holds no recurrent state slot ` +
      `of ${per} bytes: raise --kv-cache-memory-bytes or --gpu-memory-utilization`);
  }
  return { slots, cached: saved(slots) };
}

/** The engine's split of every stage's budget (`stages` in stage order); the numbers every stage allocates. */
export function planStageKv(stages: readonly StageKv[], o: StagePlanOptions): KvCachePlan {
  const named = <T>(stage: number, f: () => T): T => {
    try {
      return f();
    } catch (err) {
      throw new Error(`pipeline stage ${stage}: ${(err as Error).message}`);
    }
  };
  const base = { blockSize: o.blockSize, kvBytesPerElement: o.kvBytesPerElement, enablePrefixCaching: o.enablePrefixCaching,
    specBackupSlots: o.specBackupSlots };
  const keepsStates = stages.some((s) => stateSlotBytes(s.groups) > 0);
  let numStateSlots = keepsStates ? o.maxNumSeqs : 0;
  let numCachedStateSlots = keepsStates && o.enablePrefixCaching ? o.cachedStateSlots ?? o.maxNumSeqs : 0;
  stages.forEach((s, i) => {
    if (stateSlotBytes(s.groups) === 0) return;
    const fit = hasPages(s.groups)
      ? named(i, () => {
        const p = planKvCache(s.groups, { ...base, budgetBytes: s.budgetBytes, maxNumSeqs: o.maxNumSeqs,
          cachedStateSlots: o.cachedStateSlots, lowerToFit: true, extraBytesPerBlock: s.extraBytesPerBlock ?? 0 });
        return { slots: p.numStateSlots, cached: p.numCachedStateSlots };
      })
      : stateOnlySlots(s, o, i);
    numStateSlots = Math.min(numStateSlots, fit.slots);
    numCachedStateSlots = Math.min(numCachedStateSlots, fit.cached);
  });
  let numBlocks = Infinity;
  stages.forEach((s, i) => {
    if (!hasPages(s.groups)) return;
    const p = named(i, () => planKvCache(s.groups, { ...base, budgetBytes: s.budgetBytes,
      maxNumSeqs: keepsStates ? numStateSlots : o.maxNumSeqs, cachedStateSlots: numCachedStateSlots,
      extraBytesPerBlock: s.extraBytesPerBlock ?? 0 }));
    numBlocks = Math.min(numBlocks, p.numBlocks);
  });
  if (numBlocks === Infinity) throw new Error('no pipeline stage holds a full-attention layer: the model keeps no KV pages');
  const sum = (f: (s: StageKv) => number): number => stages.reduce((a, s) => a + f(s), 0);
  return {
    numBlocks, numStateSlots, numCachedStateSlots, numSpecBackupSlots: o.specBackupSlots ? numStateSlots : 0,
    bytesPerStateSlot: sum((s) => stateSlotBytes(s.groups)),
    bytesPerBlock: sum((s) => (hasPages(s.groups) ? bytesPerBlock(s.groups, o.blockSize, o.kvBytesPerElement) : 0)),
  };
}

/**
 * The engine's KV cache over every stage (after every rank's profile step): the plan each allocates, the whole
 * model's groups for the engine's KVCacheManager, and the whole model's bytes a step reads (a rank's share of them
 * under tensor parallelism, as one rank's are without stages). `draft`: a draft model on rank 0's device.
 */
export async function pipelineKv(leader: RankLeader, model: Model, backend: Backend, options: ResolvedEngineOptions,
  draft: Model | null): Promise<{ plan: KvCachePlan; groups: KVCacheGroup[]; weightBytesPerStep: number; kvBytesPerToken: number }> {
  const available = backend.memory().availableKvBytes;
  const stages = await leader.stages(model, options.kvCacheBytes === null ? available : Math.min(available, options.kvCacheBytes));
  const last = stages.length - 1;
  const ssmBytes = backend.ssmBytesPerElement;
  const plan = planStageKv(stages.map((s, i) => ({ groups: kvCacheGroupsOfSpecs(s.report.stateSpecs, ssmBytes),
    budgetBytes: s.budgetBytes,
    extraBytesPerBlock: i === last && draft ? draft.kvBytesPerToken() * options.blockSize : 0 })), {
    blockSize: options.blockSize, kvBytesPerElement: backend.kvBytesPerElement, maxNumSeqs: options.maxNumSeqs,
    enablePrefixCaching: options.enablePrefixCaching, cachedStateSlots: options.cachedStateSlots,
    specBackupSlots: options.speculativeConfig != null,
  });
  const sum = (f: (r: (typeof stages)[number]['report']) => number): number => stages.reduce((a, s) => a + f(s.report), 0);
  return { plan, groups: kvCacheGroupsOfSpecs(stages.flatMap((s) => s.report.stateSpecs), ssmBytes),
    weightBytesPerStep: sum((r) => r.weightBytesPerStep), kvBytesPerToken: sum((r) => r.kvBytesPerToken) };
}
