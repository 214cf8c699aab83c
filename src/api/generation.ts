// Runs one engine request (one choice) to its end: detokenizes incrementally,
// matches stop strings (aborting the engine request on a match), records
// metrics, and aborts the engine request when `signal` fires.

import type { EngineClient } from '../engine/client.js';
import { IncrementalDetokenizer } from '../engine/detokenizer.js';
import type { EngineRequest, TokenLogprob } from '../engine/types.js';
import type { Tokenizer } from '../loader/types.js';
import { ApiError, unavailable } from './errors.js';
import type { ApiMetrics } from './metrics.js';

export interface ServeContext {
  engine: EngineClient;
  tokenizer: Tokenizer;
  metrics: ApiMetrics;
  engineError(): string | null;
}

export interface ChoiceDelta {
  index: number;
  text: string;
  tokenIds: number[];
  logprobs: TokenLogprob[];
  /** On the first delta of a request that asked for prompt logprobs. */
  promptLogprobs?: (TokenLogprob | null)[];
}

export type ApiFinishReason = 'stop' | 'length' | 'abort';

export interface ChoiceOutcome {
  index: number;
  text: string;
  tokenIds: number[];
  logprobs: TokenLogprob[];
  /** One per prompt token (null for the first) when the request asked for prompt logprobs. */
  promptLogprobs: (TokenLogprob | null)[] | null;
  finishReason: ApiFinishReason;
  /** The stop string or stop token id that ended it (vLLM's `stop_reason`). */
  stopReason: string | number | null;
  numCachedTokens: number;
}

export async function runChoice(
  ctx: ServeContext,
  req: EngineRequest,
  index: number,
  signal: AbortSignal,
  onDelta?: (d: ChoiceDelta) => void,
): Promise<ChoiceOutcome> {
  const { engine, metrics } = ctx;
  const detok = new IncrementalDetokenizer(ctx.tokenizer, req.promptTokenIds, {
    skipSpecialTokens: req.sampling.skipSpecialTokens,
    stop: req.sampling.stop,
    includeStopStrInOutput: req.sampling.includeStopStrInOutput,
    minTokens: req.sampling.minTokens,
  });
  const out: ChoiceOutcome = {
    index, text: '', tokenIds: [], logprobs: [], promptLogprobs: null, finishReason: 'abort', stopReason: null,
    numCachedTokens: 0,
  };
  const onAbort = () => engine.abort(req.requestId);
  signal.addEventListener('abort', onAbort, { once: true });
  let lastOutputMs = 0;
  try {
    if (signal.aborted) onAbort();
    for await (const o of engine.generate(req)) {
      const nowMs = Date.now();
      metrics.observeEngineProgress();
      if (o.numCachedTokens !== undefined) out.numCachedTokens = o.numCachedTokens;
      if (o.promptLogprobs !== undefined) out.promptLogprobs = o.promptLogprobs;
      if (o.newTokenIds.length > 0) {
        if (lastOutputMs === 0) metrics.observeFirstToken((nowMs - req.arrivalTime) / 1000);
        else metrics.observeInterToken((nowMs - lastOutputMs) / 1000);
        lastOutputMs = nowMs;
        // A stop token's own text is left out unless include_stop_str_in_output (vLLM).
        const endsOnStopToken = o.finished && o.stopTokenId !== undefined && !req.sampling.includeStopStrInOutput;
        const pushed = detok.push(endsOnStopToken ? o.newTokenIds.slice(0, -1) : o.newTokenIds);
        const lp = o.logprobs ?? [];
        out.tokenIds.push(...o.newTokenIds);
        out.logprobs.push(...lp);
        out.text += pushed.deltaText;
        onDelta?.({ index, text: pushed.deltaText, tokenIds: o.newTokenIds, logprobs: lp,
          ...(o.promptLogprobs !== undefined ? { promptLogprobs: o.promptLogprobs } : {}) });
        if (pushed.stopped) {
          engine.abort(req.requestId);
          out.finishReason = 'stop';
          out.stopReason = pushed.stopString ?? null;
          break;
        }
      }
      if (o.finished) {
        if (o.finishReason === 'error') {
          const failure = ctx.engineError();
          throw failure !== null ? unavailable(`engine failed: ${failure}`) : new ApiError(500, o.error ?? 'engine error', 'server_error');
        }
        const tail = detok.finish();
        if (tail.deltaText.length > 0) {
          out.text += tail.deltaText;
          onDelta?.({ index, text: tail.deltaText, tokenIds: [], logprobs: [] });
        }
        out.finishReason = o.finishReason ?? 'stop';
        const eos = o.stopTokenId !== undefined && ctx.tokenizer.eosTokenIds.includes(o.stopTokenId) && !req.sampling.stopTokenIds.includes(o.stopTokenId);
        out.stopReason = o.stopTokenId === undefined || eos ? null : o.stopTokenId;
        break;
      }
    }
  } finally {
    signal.removeEventListener('abort', onAbort);
  }
  metrics.observeFinished(out.finishReason, (Date.now() - req.arrivalTime) / 1000, req.promptTokenIds.length, out.tokenIds.length);
  return out;
}
