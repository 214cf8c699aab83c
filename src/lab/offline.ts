// In-process benchmarks (no HTTP): W1 offline throughput, W4 memory pressure,
// W5 shared prefix, and W2-style decode rate by the difference method.
// Workloads are fixed in code (bench/WORKLOADS.md) and scaled only by flags.

import { readFileSync } from 'node:fs';
import { LLM, type Prompt } from '../engine/llm.js';
import type { EngineStats } from '../engine/types.js';
import type { ModelConfig } from '../loader/types.js';
import type { BatchRunner } from './bench-decode.js';
import { percentile } from './stats.js';

export interface OfflineRequest {
  promptTokenIds: number[];
  maxTokens: number;
}

export interface OfflineResult {
  /** Which engine ran it: quire here, the peer's name in tools/reference/peer_generate_batch.py. */
  engine: string;
  workload: string;
  numRequests: number;
  numPromptTokens: number;
  numOutputTokens: number;
  wallS: number;
  outputTokensPerS: number;
  /** null when no request produced a token. */
  ttftP50Ms: number | null;
  stats: EngineStats;
  /** The token budget per step and the sequence cap in effect. */
  maxNumBatchedTokens?: number;
  maxNumSeqs?: number;
}

/** The prompts a run used, as token ids (the shape of offline-256.json), for a peer engine to replay. */
export interface OfflinePromptsFile {
  name: string;
  description: string;
  /** The vocabulary the ids were folded into. */
  vocabSize: number;
  requests: { prompt_token_ids: number[]; max_tokens: number }[];
}


/** W1: offline-256.json (token ids folded into the model's vocabulary), optionally the first n requests and one output length for all. */
export function loadW1(path: string, vocabSize: number, numRequests?: number, outputLen?: number): OfflineRequest[] {
  const file = JSON.parse(readFileSync(path, 'utf8')) as { requests: { prompt_token_ids: number[]; max_tokens: number }[] };
  return file.requests.slice(0, numRequests ?? file.requests.length)
    .map((r) => ({ promptTokenIds: r.prompt_token_ids.map((t) => t % vocabSize), maxTokens: outputLen ?? r.max_tokens }));
}

export function offlinePromptsFile(name: string, vocabSize: number, requests: readonly OfflineRequest[]): OfflinePromptsFile {
  return {
    name,
    description: `${name}: ${requests.length} requests as quire bench offline runs them, ids folded into a vocabulary of ${vocabSize}`,
    vocabSize,
    requests: requests.map((r) => ({ prompt_token_ids: [...r.promptTokenIds], max_tokens: r.maxTokens })),
  };
}

/** Deterministic pseudo-random token ids (no prefix-cache hits between requests unless shared on purpose). */
export function randomTokens(n: number, vocabSize: number, seed: number): number[] {
  let x = (seed * 2654435761 + 1) >>> 0;
  return Array.from({ length: n }, () => {
    x = (Math.imul(x, 1664525) + 1013904223) >>> 0;
    return x % vocabSize;
  });
}

/** Prefill: `n` prompts of `promptLen` random tokens, one output token each. */
export function buildPrefill(n: number, promptLen: number, vocabSize: number): OfflineRequest[] {
  return Array.from({ length: n }, (_, i) => ({ promptTokenIds: randomTokens(promptLen, vocabSize, 9000 + i), maxTokens: 1 }));
}

/**
 * Model FLOPs of prefilling `promptLens` (no cache hits): 2 per weight per token for the projections (of a mixture
 * of experts, the active ones: the router, the top-k experts and a shared expert with its gate), the lm head once per
 * prompt, and causal attention (QK^T and PV over L(L+1)/2 query-key pairs per head and layer).
 */
export function prefillFlops(c: ModelConfig, promptLens: readonly number[]): number {
  const qkvN = (c.numHeads + 2 * c.numKvHeads) * c.headDim;
  const attention = c.hiddenSize * qkvN + c.numHeads * c.headDim * c.hiddenSize;
  const shared = c.moe?.sharedExpertIntermediateSize ?? null;
  const ffn = (l: number) => !c.moe?.sparseLayers[l] ? 3 * c.hiddenSize * c.intermediateSize
    : c.moe.numExperts * c.hiddenSize + c.moe.topK * 3 * c.hiddenSize * c.moe.expertIntermediateSize
      + (shared === null ? 0 : 3 * c.hiddenSize * shared + c.hiddenSize);
  let linear = 0;
  for (let l = 0; l < c.numLayers; l++) linear += attention + ffn(l);
  let flops = 0;
  for (const L of promptLens) {
    flops += 2 * L * linear + 2 * c.hiddenSize * c.vocabSize;
    flops += c.numLayers * c.numHeads * 4 * c.headDim * (L * (L + 1)) / 2;
  }
  return flops;
}

/** W4: `n` requests of `promptLen` prompt tokens and `outputLen` output tokens, all offered at once. */
export function buildW4(n: number, promptLen: number, outputLen: number, vocabSize: number): OfflineRequest[] {
  return Array.from({ length: n }, (_, i) => ({ promptTokenIds: randomTokens(promptLen, vocabSize, 1000 + i), maxTokens: outputLen }));
}

/** W5: requests sharing a `prefixLen`-token system prompt, each with its own `suffixLen`-token suffix. */
export function buildW5(n: number, prefixLen: number, suffixLen: number, outputLen: number, vocabSize: number): OfflineRequest[] {
  const prefix = randomTokens(prefixLen, vocabSize, 7);
  return Array.from({ length: n }, (_, i) => ({
    promptTokenIds: [...prefix, ...randomTokens(suffixLen, vocabSize, 5000 + i)], maxTokens: outputLen,
  }));
}

/** Runs the requests through the in-process engine at `concurrency` (all at once by default). */
export async function runOffline(llm: LLM, workload: string, requests: OfflineRequest[],
  opts: { concurrency?: number; onRequestDone?: () => void } & OfflineSampling = {}): Promise<OfflineResult> {
  const concurrency = opts.concurrency ?? requests.length;
  const ttfts: number[] = [];
  let numOutputTokens = 0;
  let next = 0;
  const t0 = performance.now();
  const worker = async (): Promise<void> => {
    while (next < requests.length) {
      const r = requests[next++]!;
      const sent = performance.now();
      let first = true;
      for await (const d of llm.stream(r.promptTokenIds as Prompt, { maxTokens: r.maxTokens, ignoreEos: true,
        temperature: opts.temperature ?? 0, ...(opts.topP !== undefined ? { topP: opts.topP } : {}),
        ...(opts.topK !== undefined ? { topK: opts.topK } : {}) })) {
        if (first && d.tokenIds.length > 0) {
          ttfts.push(performance.now() - sent);
          first = false;
        }
        numOutputTokens += d.tokenIds.length;
      }
      opts.onRequestDone?.();
    }
  };
  await Promise.all(Array.from({ length: Math.min(concurrency, requests.length) }, worker));
  const wallS = (performance.now() - t0) / 1000;
  return {
    engine: 'quire', workload, numRequests: requests.length,
    numPromptTokens: requests.reduce((a, r) => a + r.promptTokenIds.length, 0),
    numOutputTokens, wallS, outputTokensPerS: numOutputTokens / wallS,
    ttftP50Ms: ttfts.length > 0 ? percentile(ttfts, 50) : null, stats: await llm.stats(),
    maxNumBatchedTokens: llm.engineInfo().maxNumBatchedTokens, maxNumSeqs: llm.engineInfo().maxNumSeqs,
  };
}

/** How offline requests sample (greedy by default). */
export interface OfflineSampling {
  temperature?: number;
  topP?: number;
  topK?: number;
}

/** A decode BatchRunner (bench-decode.ts) over the in-process engine: wall ms for the batch. */
export function llmBatchRunner(llm: LLM, sampling: OfflineSampling = {}): BatchRunner {
  return async (prompts, maxTokens) => {
    const t0 = performance.now();
    await runOffline(llm, 'decode', prompts.map((p) => ({ promptTokenIds: p, maxTokens })), sampling);
    return performance.now() - t0;
  };
}
