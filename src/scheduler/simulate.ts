// Pure simulation of the scheduler and KV manager, no model: sampled tokens are
// fake ids. Checks the scheduler's figures for two workloads:
//   W4 memory pressure: a small pool, many requests of P prompt and O output tokens;
//   W5 shared prefix: requests sharing a long system prompt, prefix caching on vs off.
// Run: node dist/src/scheduler/simulate.js

import { pathToFileURL } from 'node:url';
import { KVCacheManager } from '../kv/kv-cache-manager.js';
import { Request } from './request.js';
import { Scheduler, type SchedulerOptions } from './scheduler.js';

export interface SimResult {
  numSteps: number;
  numRequests: number;
  /** Most requests in the running set after any step's scheduling. */
  maxRunning: number;
  numPreemptions: number;
  /** Prompt and recompute tokens fed to the model. */
  numPromptTokensComputed: number;
  numDecodeTokens: number;
  prefixCacheHitTokens: number;
}

export interface SimSetup {
  numBlocks: number;
  blockSize: number;
  maxNumBatchedTokens: number;
  maxNumSeqs: number;
  enablePrefixCaching: boolean;
  scheduler?: Partial<SchedulerOptions>;
  /** Requests in flight at most (the client's concurrency); Infinity = all at once. */
  concurrency: number;
}

export interface SimRequest {
  promptTokenIds: number[];
  outputTokens: number;
}

/** Runs requests to completion; a request finishes when it has its output tokens. */
export function runSimulation(setup: SimSetup, requests: readonly SimRequest[], maxSteps = 1_000_000): SimResult {
  const kv = new KVCacheManager({ numBlocks: setup.numBlocks, blockSize: setup.blockSize,
    enablePrefixCaching: setup.enablePrefixCaching });
  const sched = new Scheduler({ maxNumBatchedTokens: setup.maxNumBatchedTokens, maxNumSeqs: setup.maxNumSeqs,
    blockSize: setup.blockSize, ...setup.scheduler }, kv);
  const r: SimResult = { numSteps: 0, numRequests: requests.length, maxRunning: 0, numPreemptions: 0,
    numPromptTokensComputed: 0, numDecodeTokens: 0, prefixCacheHitTokens: 0 };
  let next = 0;
  let numInFlight = 0;
  const submit = () => {
    while (next < requests.length && numInFlight < setup.concurrency) {
      const spec = requests[next]!;
      sched.addRequest(new Request({ requestId: `r${next}`, promptTokenIds: spec.promptTokenIds,
        maxTokens: spec.outputTokens, arrivalTime: next }));
      next++;
      numInFlight++;
    }
  };
  submit();
  while (sched.hasUnfinishedRequests()) {
    if (r.numSteps++ >= maxSteps) throw new Error(`simulation did not finish in ${maxSteps} steps`);
    const out = sched.schedule();
    r.maxRunning = Math.max(r.maxRunning, sched.numRunning);
    const sampled = new Map<string, number[]>();
    for (const row of out.scheduledRequests) {
      if (row.isDecode) r.numDecodeTokens += row.numScheduledTokens;
      else r.numPromptTokensComputed += row.numScheduledTokens;
      if (row.sample) sampled.set(row.requestId, [fakeTokenId(row.requestId, row.seqLen)]);
    }
    if (out.scheduledRequests.length > 0) sched.updateFromOutput(sampled);
    const done: string[] = [];
    for (const id of sampled.keys()) {
      const req = sched.getRequest(id)!;
      if (req.numOutputTokens >= req.maxTokens) done.push(id);
    }
    sched.finishRequests(done, 'FINISHED_LENGTH');
    numInFlight -= done.length;
    submit();
  }
  r.numPreemptions = sched.numPreemptions;
  r.prefixCacheHitTokens = kv.prefixCacheHits;
  return r;
}

function fakeTokenId(requestId: string, position: number): number {
  let h = position * 2654435761;
  for (let i = 0; i < requestId.length; i++) h = Math.imul(h ^ requestId.charCodeAt(i), 16777619);
  return (h >>> 0) % 150_000;
}

function uniqueTokens(seed: number, n: number): number[] {
  return Array.from({ length: n }, (_, j) => fakeTokenId(`p${seed}`, j));
}

export interface W4Options {
  numBlocks: number;
  blockSize: number;
  promptTokens: number;
  outputTokens: number;
  numRequests: number;
  maxNumBatchedTokens: number;
  maxNumSeqs: number;
  /** Context a reserving cache sets aside per sequence; default prompt + output. */
  maxModelLen?: number;
}

export interface W4Result extends SimResult {
  /** Sequences a cache that reserves maxModelLen per sequence could run at once. */
  maxRunningFullReservation: number;
  concurrencyRatio: number;
}

export function simulateW4(o: W4Options): W4Result {
  const requests = Array.from({ length: o.numRequests },
    (_, i) => ({ promptTokenIds: uniqueTokens(i, o.promptTokens), outputTokens: o.outputTokens }));
  const r = runSimulation({ numBlocks: o.numBlocks, blockSize: o.blockSize, maxNumBatchedTokens: o.maxNumBatchedTokens,
    maxNumSeqs: o.maxNumSeqs, enablePrefixCaching: false, concurrency: Infinity }, requests);
  const blocksPerSeq = Math.ceil((o.maxModelLen ?? o.promptTokens + o.outputTokens) / o.blockSize);
  const full = Math.min(o.maxNumSeqs, Math.floor((o.numBlocks - 1) / blocksPerSeq));
  return { ...r, maxRunningFullReservation: full, concurrencyRatio: r.maxRunning / full };
}

export interface W5Options {
  numRequests: number;
  sharedPrefixTokens: number;
  suffixTokens: number;
  outputTokens: number;
  concurrency: number;
  numBlocks: number;
  blockSize: number;
  maxNumBatchedTokens: number;
  maxNumSeqs: number;
}

export interface W5Result {
  cachingOn: SimResult;
  cachingOff: SimResult;
  /** Prompt tokens computed with caching on / off. */
  promptComputeRatio: number;
}

export function simulateW5(o: W5Options): W5Result {
  const shared = uniqueTokens(-1, o.sharedPrefixTokens);
  const requests = Array.from({ length: o.numRequests }, (_, i) => ({
    promptTokenIds: [...shared, ...uniqueTokens(i, o.suffixTokens)], outputTokens: o.outputTokens,
  }));
  const setup = { numBlocks: o.numBlocks, blockSize: o.blockSize, maxNumBatchedTokens: o.maxNumBatchedTokens,
    maxNumSeqs: o.maxNumSeqs, concurrency: o.concurrency };
  const cachingOn = runSimulation({ ...setup, enablePrefixCaching: true }, requests);
  const cachingOff = runSimulation({ ...setup, enablePrefixCaching: false }, requests);
  return { cachingOn, cachingOff,
    promptComputeRatio: cachingOn.numPromptTokensComputed / cachingOff.numPromptTokensComputed };
}

export const W4_DEFAULT: W4Options = { numBlocks: 513, blockSize: 16, promptTokens: 512, outputTokens: 256,
  numRequests: 128, maxNumBatchedTokens: 2048, maxNumSeqs: 256 };
export const W5_DEFAULT: W5Options = { numRequests: 64, sharedPrefixTokens: 2000, suffixTokens: 100,
  outputTokens: 64, concurrency: 16, numBlocks: 4097, blockSize: 16, maxNumBatchedTokens: 2048, maxNumSeqs: 256 };

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const w4 = simulateW4(W4_DEFAULT);
  console.log('W4', JSON.stringify(W4_DEFAULT));
  console.log(`  max running ${w4.maxRunning} vs full reservation ${w4.maxRunningFullReservation} ` +
    `(ratio ${w4.concurrencyRatio.toFixed(2)}), preemptions ${w4.numPreemptions}, steps ${w4.numSteps}, ` +
    `prompt tokens computed ${w4.numPromptTokensComputed} (of ${W4_DEFAULT.numRequests * W4_DEFAULT.promptTokens} prompt)`);
  const w5 = simulateW5(W5_DEFAULT);
  console.log('W5', JSON.stringify(W5_DEFAULT));
  console.log(`  prompt tokens computed: caching on ${w5.cachingOn.numPromptTokensComputed}, ` +
    `off ${w5.cachingOff.numPromptTokensComputed} (ratio ${w5.promptComputeRatio.toFixed(3)}); ` +
    `hit tokens ${w5.cachingOn.prefixCacheHitTokens}; steps on ${w5.cachingOn.numSteps}, off ${w5.cachingOff.numSteps}`);
}
