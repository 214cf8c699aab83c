// Decode rate by the difference method (WORKLOADS.md W2): the same batch run
// for g1 and g2 output tokens, rate = batch * (g2 - g1) / (t(g2) - t(g1)),
// targets interleaved per repeat and compared as ratios to the first.

import { performance } from 'node:perf_hooks';
import { streamCompletion } from './client.js';
import { median, differenceMethodTokensPerS, ratioAcrossRounds, type RatioSpread } from './stats.js';
import { applyNonce, freshNonce, makePrompt, seededRng } from './workloads.js';

/** Runs `prompts.length` requests at once for `maxTokens` tokens each (EOS ignored); resolves to the wall time in ms. */
export type BatchRunner = (prompts: number[][], maxTokens: number) => Promise<number>;

export interface DecodeTarget {
  name: string;
  run: BatchRunner;
}

export interface BenchDecodeOptions {
  targets: DecodeTarget[];
  batchSize?: number;
  promptTokens?: number;
  g1?: number;
  g2?: number;
  /** Measured repeats per target (after one warm-up pair). */
  numRepeats?: number;
  vocabSize?: number;
  /**
   * Prompts as token ids, row i taking prompts[i % length], each run as given (no nonce: text stays text; a prompt
   * repeated hits the prefix cache in the g1 and the g2 run alike). Absent: random token ids of promptTokens.
   */
  prompts?: number[][];
}

export interface DecodeTargetResult {
  name: string;
  t1Ms: number[];
  t2Ms: number[];
  /** One difference-method rate per repeat. */
  tokensPerS: number[];
  medianTokensPerS: number;
  /** Per sequence: medianTokensPerS / batchSize. */
  perSeqTokensPerS: number;
}

export interface BenchDecodeResult {
  batchSize: number;
  promptTokens: number;
  g1: number;
  g2: number;
  numRepeats: number;
  targets: DecodeTargetResult[];
  /** Each target's rate over the first's, per repeat. */
  ratios: { target: string; baseline: string; tokensPerS: RatioSpread }[];
}

export async function benchDecode(opts: BenchDecodeOptions): Promise<BenchDecodeResult> {
  const batchSize = opts.batchSize ?? 1;
  const promptTokens = opts.promptTokens ?? 128;
  const g1 = opts.g1 ?? 64;
  const g2 = opts.g2 ?? 320;
  const numRepeats = opts.numRepeats ?? 3;
  const vocabSize = opts.vocabSize ?? 32000;
  const rng = seededRng(2);
  const given = opts.prompts;
  if (given?.length === 0) throw new Error('benchDecode: prompts is empty');
  const base = given ? Array.from({ length: batchSize }, (_, i) => given[i % given.length]!)
    : Array.from({ length: batchSize }, () => makePrompt({ format: 'ids', vocabSize, rng }, promptTokens) as number[]);
  const fresh = () => (given ? base : base.map((p) => applyNonce(p, freshNonce(vocabSize)) as number[]));
  const times = new Map(opts.targets.map((t) => [t.name, { t1Ms: [] as number[], t2Ms: [] as number[] }]));
  for (const t of opts.targets) {
    await t.run(fresh(), g1);
    await t.run(fresh(), g2);
  }
  for (let i = 0; i < numRepeats; i++) {
    for (const t of opts.targets) {
      const rec = times.get(t.name)!;
      rec.t1Ms.push(await t.run(fresh(), g1));
      rec.t2Ms.push(await t.run(fresh(), g2));
    }
  }
  const targets = opts.targets.map((t): DecodeTargetResult => {
    const { t1Ms, t2Ms } = times.get(t.name)!;
    const tokensPerS = t1Ms.map((t1, i) => differenceMethodTokensPerS(batchSize, g1, t1, g2, t2Ms[i]!));
    const med = median(tokensPerS);
    return { name: t.name, t1Ms, t2Ms, tokensPerS, medianTokensPerS: med, perSeqTokensPerS: med / batchSize };
  });
  const [first, ...rest] = targets;
  return {
    batchSize,
    promptTokens: given ? base.reduce((a, p) => a + p.length, 0) / batchSize : promptTokens,
    g1,
    g2,
    numRepeats,
    targets,
    ratios: first ? rest.map((t) => ({ target: t.name, baseline: first.name, tokensPerS: ratioAcrossRounds(first.tokensPerS, t.tokensPerS) })) : [],
  };
}

/** A BatchRunner over /v1/completions: token-id prompts, EOS ignored; fails when any request fails or comes back short. */
export function httpBatchRunner(url: string, model: string, extraBody: Record<string, unknown> = {}): BatchRunner {
  return async (prompts, maxTokens) => {
    const startMs = performance.now();
    const rs = await Promise.all(prompts.map((prompt) => streamCompletion({ url, model, prompt, maxTokens, ignoreEos: true, temperature: 0, extraBody })));
    const elapsedMs = performance.now() - startMs;
    const bad = rs.find((r) => !r.ok || r.outputTokens !== maxTokens);
    if (bad) throw new Error(`decode batch against ${url}: ${bad.error ?? `${bad.outputTokens} of ${maxTokens} tokens`}`);
    return elapsedMs;
  };
}

/** What one decode step reads: the weights, each row's K and V of its context, and a hybrid's recurrent state. */
export interface DecodeStepBytes {
  weightBytes: number;
  kvBytesPerToken: number;
  /** Bytes of recurrent state a sequence holds (read and written every step); 0 for other models. */
  stateBytesPerSeq: number;
}

/**
 * The per-sequence roofline, in steps/s, of a batch of `batchSize` rows at `contextTokens` of context each (the
 * mean over the measured tokens): copy bandwidth over the bytes a step moves, the weights once and each row's K/V
 * of its context and its state (read and written). A share of it is a row's tokens/s over this.
 */
export function decodeRooflineStepsPerS(bandwidth: number, b: DecodeStepBytes, batchSize: number,
  contextTokens: number): number {
  return bandwidth / (b.weightBytes + batchSize * (contextTokens * b.kvBytesPerToken + 2 * b.stateBytesPerSeq));
}

/** The mean context of the tokens the difference method counts: the prompt plus the middle of (g1, g2]. */
export function meanMeasuredContext(promptTokens: number, g1: number, g2: number): number {
  return promptTokens + (g1 + g2) / 2;
}

