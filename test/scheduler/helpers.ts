import { buildForwardBatch } from '../../src/engine/batch-builder.js';
import { KVCacheManager } from '../../src/kv/kv-cache-manager.js';
import type { KVCacheGroup } from '../../src/kv/kv-cache-spec.js';
import { Request } from '../../src/scheduler/request.js';
import { Scheduler, type ScheduledRequest, type SchedulerOptions, type SchedulerOutput } from '../../src/scheduler/scheduler.js';

export interface Setup extends Partial<SchedulerOptions> {
  numBlocks?: number;
  enablePrefixCaching?: boolean;
  /** KV cache groups; absent: one (a dense model). */
  groups?: readonly KVCacheGroup[];
  /** The recurrent group's state slots (default: maxNumSeqs, as the engine sizes them). */
  numStateSlots?: number;
  /** Slots for recurrent states saved for the prefix cache (default 0). */
  numCachedStateSlots?: number;
  /** A backup slot per state slot (speculative decoding on a hybrid model; default off). */
  specBackupSlots?: boolean;
}

export function makeScheduler(o: Setup = {}): { sched: Scheduler; kv: KVCacheManager } {
  const blockSize = o.blockSize ?? 4;
  const kv = new KVCacheManager({ numBlocks: o.numBlocks ?? 64, blockSize,
    enablePrefixCaching: o.enablePrefixCaching ?? false, ...(o.groups ? { groups: o.groups } : {}),
    numStateSlots: o.numStateSlots ?? o.maxNumSeqs ?? 16, numCachedStateSlots: o.numCachedStateSlots ?? 0,
    specBackupSlots: o.specBackupSlots ?? false });
  const { groups: _, numStateSlots: __, numCachedStateSlots: ___, specBackupSlots: ____, ...options } = o;
  const sched = new Scheduler({ maxNumBatchedTokens: 64, maxNumSeqs: 16, ...options, blockSize }, kv);
  return { sched, kv };
}

/** A request whose prompt is `numPromptTokens` ids unique to its id (or `tokens` when given). */
export function makeRequest(requestId: string, numPromptTokens: number, maxTokens: number,
  extra: { priority?: number; arrivalTime?: number; tokens?: number[]; cacheSalt?: string; promptLogits?: boolean } = {}): Request {
  const base = 1000 * (requestId.charCodeAt(0) + requestId.length);
  const promptTokenIds = extra.tokens ?? Array.from({ length: numPromptTokens }, (_, i) => base + i);
  return new Request({ requestId, promptTokenIds, maxTokens, priority: extra.priority,
    arrivalTime: extra.arrivalTime ?? 0, cacheSalt: extra.cacheSalt, promptLogits: extra.promptLogits });
}

/** One engine step with fake sampling (token = 7 * seqLen); finishes requests at maxTokens. */
export function step(sched: Scheduler): SchedulerOutput {
  const out = sched.schedule();
  const sampled = new Map<string, number[]>();
  for (const r of out.scheduledRequests) if (r.sample) sampled.set(r.requestId, [7 * r.seqLen]);
  if (out.scheduledRequests.length > 0) sched.updateFromOutput(sampled);
  const done = [...sampled.keys()].filter((id) => {
    const req = sched.getRequest(id)!;
    return req.numOutputTokens >= req.maxTokens;
  });
  sched.finishRequests(done, 'FINISHED_LENGTH');
  return out;
}

export const rows = (out: SchedulerOutput) => out.scheduledRequests.map((r) => [r.requestId, r.numScheduledTokens]);

/** A scheduled row's positions and the KV slots it writes, through the engine's batch builder. */
export function rowSlots(row: ScheduledRequest, blockSize: number): { positions: number[]; slots: number[] } {
  const b = buildForwardBatch([row], blockSize);
  return { positions: [...b.positions], slots: [...b.slotMapping] };
}
