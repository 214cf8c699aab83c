import type { EngineStats } from './types.js';

export function emptyStats(): EngineStats {
  return {
    numRunning: 0, numRunningPeak: 0, numWaiting: 0, kvCacheUsage: 0, numFreeBlocks: 0, numTotalBlocks: 0, numFreeStateSlots: 0, numTotalStateSlots: 0,
    numCachedStates: 0, numCachedStateSlots: 0,
    prefixCacheQueries: 0, prefixCacheHits: 0, numPreemptions: 0, numPromptTokens: 0,
    numGenerationTokens: 0, numSteps: 0, numStepsScheduledAhead: 0, executeMs: 0, hostMs: 0, numGraphCaptures: 0, graphCaptureMs: 0, minBytesRead: 0,
  };
}
