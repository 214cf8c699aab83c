import type { SpecDecodingStats } from './spec/spec-decode.js';
import type { EngineStats } from './types.js';

export function emptyStats(): EngineStats {
  return {
    numRunning: 0, numRunningPeak: 0, numWaiting: 0, kvCacheUsage: 0, numFreeBlocks: 0, numTotalBlocks: 0, numFreeStateSlots: 0, numTotalStateSlots: 0,
    numCachedStates: 0, numCachedStateSlots: 0,
    prefixCacheQueries: 0, prefixCacheHits: 0, numPreemptions: 0, numPromptTokens: 0,
    numGenerationTokens: 0, numSteps: 0, numStepsScheduledAhead: 0, executeMs: 0, hostMs: 0, numGraphCaptures: 0, graphCaptureMs: 0, minBytesRead: 0,
  };
}

/**
 * The stats of several engines (data-parallel replicas) as one: counts, counters and times summed (executeMs is
 * then engine time over all devices, numSteps the steps of all of them); kvCacheUsage is the share of all their
 * usable pages in use (each replica's fraction weighted by its usable pages: a plain mean would let a small pool
 * count as much as a large one); numRunningPeak is the sum of each one's peak, an upper bound of the peak of the
 * sum (the replicas do not report when theirs came).
 */
export function sumStats(all: readonly EngineStats[]): EngineStats {
  const out = emptyStats();
  let usedPages = 0;
  let usablePages = 0;
  let spec: SpecDecodingStats | undefined;
  for (const s of all) {
    for (const k of Object.keys(out) as (keyof EngineStats)[]) {
      if (k === 'kvCacheUsage' || k === 'specDecoding') continue;
      (out[k] as number) += s[k] as number;
    }
    const usable = Math.max(0, s.numTotalBlocks - 1);  // block 0 is never handed out (BlockPool)
    usedPages += s.kvCacheUsage * usable;
    usablePages += usable;
    if (s.specDecoding) spec = addSpec(spec, s.specDecoding);
  }
  out.kvCacheUsage = usablePages > 0 ? usedPages / usablePages : 0;
  if (spec) out.specDecoding = spec;
  return out;
}

function addSpec(a: SpecDecodingStats | undefined, b: SpecDecodingStats): SpecDecodingStats {
  if (!a) return { ...b, numAcceptedTokensPerPos: [...b.numAcceptedTokensPerPos] };
  const perPos = Array.from({ length: Math.max(a.numAcceptedTokensPerPos.length, b.numAcceptedTokensPerPos.length) },
    (_, j) => (a.numAcceptedTokensPerPos[j] ?? 0) + (b.numAcceptedTokensPerPos[j] ?? 0));
  return { numDrafts: a.numDrafts + b.numDrafts, numDraftTokens: a.numDraftTokens + b.numDraftTokens,
    numAcceptedTokens: a.numAcceptedTokens + b.numAcceptedTokens, numAcceptedTokensPerPos: perPos,
    ...(a.numDraftFailures !== undefined || b.numDraftFailures !== undefined
      ? { numDraftFailures: (a.numDraftFailures ?? 0) + (b.numDraftFailures ?? 0) } : {}) };
}
