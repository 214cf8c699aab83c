// Before a serving benchmark: two requests to a target tell how many tokens its tokenizer makes of the workload's
// words (so a text prompt of --prompt-len N is N tokens on that server) and how fast it prefills and decodes (so the
// run's length can be estimated, and a run of hours is announced before it starts).

import { streamCompletion, type CompletionRequest, type RequestResult } from './client.js';
import { makePrompt, seededRng, type Workload } from './workloads.js';
import type { BenchTarget } from './bench-serve.js';

export interface TargetSpeed {
  target: string;
  /** Tokens per generated word, and the tokens a prompt costs beyond its words (BOS); null: the server gave no usage. */
  tokensPerWord: number | null;
  offsetTokens: number;
  prefillTokensPerS: number;
  decodeTokensPerS: number;
}

const SHORT_WORDS = 32;
/** The longer probe's words, tried in turn: a server of a short context refuses the longest. */
const LONG_WORDS = [288, 128, 64] as const;
const PROBE_OUTPUT_TOKENS = 16;

export async function probeTarget(target: BenchTarget,
  send: (req: CompletionRequest) => Promise<RequestResult> = streamCompletion): Promise<TargetSpeed> {
  const maker = { format: 'text' as const, vocabSize: 32000, rng: seededRng(1234) };
  const ask = (numWords: number): Promise<RequestResult> => send({ url: target.url, model: target.model,
    prompt: makePrompt(maker, numWords), maxTokens: PROBE_OUTPUT_TOKENS, ignoreEos: true,
    ...(target.extraBody ? { extraBody: target.extraBody } : {}), ...(target.headers ? { headers: target.headers } : {}) });
  const short = await ask(SHORT_WORDS);
  if (!short.ok) throw new Error(`probing ${target.name} (${target.url}) failed: ${short.error}`);
  let long = short;
  let numLongWords: number = SHORT_WORDS;
  for (const n of LONG_WORDS) {
    const r = await ask(n);
    if (r.ok) {
      long = r;
      numLongWords = n;
      break;
    }
  }
  // a ratio over the longest prompt that fits (a fit through both points swings with the words drawn, on tokenizers
  // that split words unevenly)
  const tokensPerWord = long.promptTokens === null ? null : long.promptTokens / numLongWords;
  const offsetTokens = 0;
  const numLongTokens = long.promptTokens ?? numLongWords;
  // from the time after the first token (a server may send several tokens in one chunk: the gaps alone mislead)
  const itlMs = Math.max(long.e2eMs - long.ttftMs, 1) / Math.max(1, long.outputTokens - 1);
  return {
    target: target.name, tokensPerWord, offsetTokens,
    prefillTokensPerS: numLongTokens / Math.max(1e-3, long.ttftMs / 1000),
    decodeTokensPerS: 1000 / Math.max(1e-3, itlMs),
  };
}

/** The words a text prompt needs to be `numTokens` tokens on a server (at least 1). */
export function wordsForTokens(numTokens: number, speed: Pick<TargetSpeed, 'tokensPerWord' | 'offsetTokens'>): number {
  if (speed.tokensPerWord === null || !(speed.tokensPerWord > 0)) return numTokens;
  return Math.max(1, Math.round((numTokens - speed.offsetTokens) / speed.tokensPerWord));
}

export interface WorkEstimate {
  numRequests: number;
  numPromptTokens: number;
  numOutputTokens: number;
  /**
   * Seconds if the server overlapped the decoding of requests perfectly up to each level's concurrency (prompts are
   * compute-bound: their tokens do not overlap), and if it overlapped nothing.
   */
  minS: number;
  maxS: number;
}

/** The work of a workload over rounds and targets, and its time at the speeds measured. */
export function estimateWork(workload: Workload, numRounds: number, speeds: readonly TargetSpeed[]): WorkEstimate {
  const e: WorkEstimate = { numRequests: 0, numPromptTokens: 0, numOutputTokens: 0, minS: 0, maxS: 0 };
  for (const level of workload.levels) {
    const parallel = Math.max(1, Math.min(level.concurrency ?? level.requests.length, level.requests.length));
    for (const speed of speeds) {
      let prefillS = 0;
      let decodeS = 0;
      for (const r of level.requests) {
        prefillS += r.approxPromptTokens / speed.prefillTokensPerS;
        decodeS += r.maxTokens / speed.decodeTokensPerS;
        e.numPromptTokens += r.approxPromptTokens * numRounds;
        e.numOutputTokens += r.maxTokens * numRounds;
      }
      e.numRequests += level.requests.length * numRounds;
      e.maxS += (prefillS + decodeS) * numRounds;
      e.minS += (prefillS + decodeS / parallel) * numRounds;
    }
  }
  return e;
}

export function formatDuration(s: number): string {
  if (s < 90) return `${Math.max(1, Math.round(s))} s`;
  if (s < 5400) return `${Math.round(s / 60)} min`;
  return `${(s / 3600).toFixed(1)} h`;
}
