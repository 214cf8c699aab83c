// The offline API, as vLLM's: new LLM(modelDir, options).generate(prompts, params), and a
// streaming form; without a model, the bundled demo model (models/quire-demo). Requests run
// concurrently through the same engine step loop the server uses; text comes from the
// incremental detokenizer (stop strings). One engine runs on this thread (InProcessEngineClient);
// with data_parallel_size N > 1, N engines run in worker threads behind a DataParallelClient, and
// this thread only tokenizes and detokenizes.

import { renderChat } from '../loader/chat-template.js';
import { loadModel, type ModelDir } from '../loader/model-dir.js';
import type { ChatMessage } from '../loader/types.js';
import { defaultSamplingParams, type SamplingParams } from '../sampling/params.js';
import { modelPoolerConfig } from '../loader/pooler-config.js';
import { validateSamplingParams, type RawSamplingParams } from '../sampling/validate.js';
import { defaultModelDir } from '../loader/default-model.js';
import { IncrementalDetokenizer } from './detokenizer.js';
import type { EngineClient } from './client.js';
import { checkDataParallelSize, DataParallelClient } from './data-parallel-client.js';
import type { EngineCore } from './engine-core.js';
import { createEngineCore } from './create-engine.js';
import { InProcessEngineClient } from './inprocess-client.js';
import { toEngineOptions, toRawSamplingParams, type LLMOptions, type LLMSamplingParams } from './llm-params.js';
import { engineOptions } from './options.js';
import type { EngineStats, FinishReason, TokenLogprob } from './types.js';
import type { EngineInfo } from './worker-protocol.js';

export type Prompt = string | readonly number[];

export interface Completion {
  promptTokenIds: number[];
  tokenIds: number[];
  text: string;
  finishReason: FinishReason;
  /** The stop string or stop token id that ended it, if one did. */
  stopReason: string | number | null;
  numCachedTokens: number;
  /** One per generated token when params.logprobs was set. */
  logprobs?: TokenLogprob[];
  /** One per prompt token (null for the first) when params.promptLogprobs was set. */
  promptLogprobs?: (TokenLogprob | null)[];
}

/** An embedding (LLM.embed, vLLM's LLM.embed): the pooled final hidden state of a prompt's last token. */
export interface Embedding {
  promptTokenIds: number[];
  embedding: number[];
  numCachedTokens: number;
}

export interface CompletionDelta {
  text: string;
  tokenIds: number[];
  finished: boolean;
  finishReason?: FinishReason;
}

const LIMITS = { maxLogprobs: 20, maxStopStrings: 64 };

/** The loaded engine: one on this thread (core), or a data-parallel one (dp). */
interface Started {
  dir: ModelDir;
  client: EngineClient;
  core: EngineCore | null;
  dp: DataParallelClient | null;
}

export class LLM {
  private readonly started: Promise<Started>;
  private numRequests = 0;
  private info: EngineInfo | null = null;
  private readonly hfOverrides: Record<string, unknown> | null;

  /**
   * `new LLM()` (the bundled demo model), `new LLM(modelDir, options)` or, as vLLM's `LLM(model=...)`,
   * `new LLM({ model, ...options })`. Options take vLLM's names (max_model_len) or camelCase (maxModelLen).
   */
  constructor(model?: string | (LLMOptions & { model?: string }), options: LLMOptions = {}) {
    let modelDir: string;
    if (typeof model === 'object' && model !== null) {
      const { model: dir, ...rest } = model;
      modelDir = dir ?? defaultModelDir();
      options = { ...rest, ...options };
    } else {
      modelDir = model ?? defaultModelDir();
    }
    const opts = engineOptions({ ...toEngineOptions(options), model: modelDir });
    checkDataParallelSize(opts.dataParallelSize);
    if (opts.nodeRank > 0) {
      throw new Error(`nodeRank ${opts.nodeRank}: the LLM class is node 0 (the engine); other nodes run \`quire serve\` with their --node-rank`);
    }
    this.hfOverrides = opts.hfOverrides;
    this.started = (async (): Promise<Started> => {
      const dir = await loadModel(modelDir, opts);
      if (opts.dataParallelSize > 1) {
        const dp = await DataParallelClient.start({ ...opts, model: dir.dir });
        this.info = dp.info;
        return { dir, client: dp, core: null, dp };
      }
      const core = await createEngineCore(opts, dir);
      this.info = core.info;
      return { dir, client: new InProcessEngineClient(core), core, dp: null };
    })();
  }

  /** Resolves once the model is loaded (rejects with the load error). */
  async ready(): Promise<ModelDir> {
    return (await this.started).dir;
  }

  /**
   * Completes each prompt (a string or token ids). `params` are vLLM's SamplingParams fields (max_tokens, top_p, ...)
   * or their camelCase forms; an unknown key is an error, never ignored.
   */
  async generate(prompts: Prompt | readonly Prompt[], params: LLMSamplingParams | RawSamplingParams = {}): Promise<Completion[]> {
    const raw = toRawSamplingParams(params);
    const list: readonly Prompt[] = typeof prompts === 'string' || isTokenIds(prompts) ? [prompts as Prompt] : prompts as readonly Prompt[];
    return Promise.all(list.map(async (p) => {
      let last: (Completion & { final: boolean }) | null = null;
      for await (const c of this.run(p, raw)) last = c;
      const { final: _final, ...completion } = last!;
      return completion;
    }));
  }

  /**
   * Embeds each prompt (vLLM's LLM.embed): prefilled in the engine's batches, its last token's final hidden state
   * pooled as the model's sentence-transformers files say (pooler-config.ts; by default normalized), truncated to
   * `dimensions` where given (a Matryoshka model's).
   */
  async embed(prompts: Prompt | readonly Prompt[], opts: { normalize?: boolean; dimensions?: number | null } = {}):
    Promise<Embedding[]> {
    const { dir, client } = await this.started;
    const pooler = modelPoolerConfig(dir.dir, opts.normalize === undefined ? null : { normalize: opts.normalize },
      this.hfOverrides);
    const dimensions = opts.dimensions ?? null;
    if (dimensions !== null && pooler.matryoshkaDimensions !== null && !pooler.matryoshkaDimensions.includes(dimensions)) {
      throw new Error(`${dir.dir}: the model does not support ${dimensions} dimensions (not a Matryoshka model, or not one of its sizes)`);
    }
    const list: readonly Prompt[] = typeof prompts === 'string' || isTokenIds(prompts) ? [prompts as Prompt] : prompts as readonly Prompt[];
    return Promise.all(list.map(async (p) => {
      const promptTokenIds = typeof p === 'string' ? dir.tokenizer.encode(p, { addSpecialTokens: true }) : [...p];
      const requestId = `llm-${this.numRequests++}`;
      for await (const o of client.generate({ requestId, promptTokenIds, sampling: defaultSamplingParams({ maxTokens: 1 }),
        priority: 0, cacheSalt: null, arrivalTime: Date.now(), pooling: { normalize: pooler.normalize, dimensions } })) {
        if (o.error) throw new Error(o.error);
        if (o.embedding) return { promptTokenIds, embedding: o.embedding, numCachedTokens: o.numCachedTokens ?? 0 };
      }
      throw new Error(`${requestId}: the engine ended the request without an embedding`);
    }));
  }

  /** Streams one prompt's text as it is produced. */
  async *stream(prompt: Prompt, params: LLMSamplingParams | RawSamplingParams = {}): AsyncIterable<CompletionDelta> {
    const raw = toRawSamplingParams(params);
    let numTokens = 0;
    let numChars = 0;
    for await (const c of this.run(prompt, raw)) {
      const delta: CompletionDelta = { text: c.text.slice(numChars), tokenIds: c.tokenIds.slice(numTokens), finished: false };
      numChars = c.text.length;
      numTokens = c.tokenIds.length;
      if (c.final) {
        delta.finished = true;
        delta.finishReason = c.finishReason;
      }
      yield delta;
    }
  }

  /** Renders messages with the model's chat template (generation prompt added). */
  async renderChat(messages: ChatMessage[]): Promise<string> {
    const dir = await this.ready();
    if (!dir.chatTemplate) throw new Error(`${dir.dir}: the model has no chat template`);
    return renderChat(dir.chatTemplate, messages, {
      addGenerationPrompt: true, bosToken: dir.bosToken ?? '', eosToken: dir.eosToken ?? '',
    });
  }

  /** Backend, device and KV pool of the loaded engine (after ready(); data parallel: a replica's, the smallest pool). */
  engineInfo(): EngineInfo {
    if (!this.info) throw new Error('engineInfo() before ready()');
    return this.info;
  }

  /** Device copy bandwidth in bytes/s (CUDA; data parallel: all the devices'), for the roofline; null on the CPU. */
  async copyBandwidth(): Promise<number | null> {
    const { core, dp } = await this.started;
    return core ? core.copyBandwidth() : dp!.probe('copyBandwidth');
  }

  /** bf16 GEMM FLOP/s on 8192^3 (CUDA; data parallel: all the devices'), for the prefill roofline; null on the CPU. */
  async gemmPeak(): Promise<number | null> {
    const { core, dp } = await this.started;
    return core ? core.gemmPeak() : dp!.probe('gemmPeak');
  }

  /** Engine counters (pages, prefix cache, preemptions, tokens); data parallel: summed over the replicas. */
  async stats(): Promise<EngineStats> {
    return (await this.started).client.stats();
  }

  async close(): Promise<void> {
    const { client } = await this.started;
    await client.shutdown();
  }

  /** Yields the completion so far after every engine output; the last one has final: true. */
  private async *run(prompt: Prompt, raw: RawSamplingParams): AsyncIterable<Completion & { final: boolean }> {
    const { dir, client } = await this.started;
    const tokenizer = dir.tokenizer;
    const params: SamplingParams = validateSamplingParams(raw, { vocabSize: dir.config.vocabSize, ...LIMITS });
    const promptTokenIds = typeof prompt === 'string' ? tokenizer.encode(prompt) : [...prompt];
    const requestId = `llm-${this.numRequests++}`;
    const detok = new IncrementalDetokenizer(tokenizer, promptTokenIds, {
      skipSpecialTokens: params.skipSpecialTokens, stop: params.stop,
      includeStopStrInOutput: params.includeStopStrInOutput, minTokens: params.minTokens,
    });
    const c: Completion & { final: boolean } = {
      promptTokenIds, tokenIds: [], text: '', finishReason: 'length', stopReason: null, numCachedTokens: 0, final: false,
    };
    // a consumer that stops early (a chat's Ctrl-C ends its for await) ends the request too: its pages free at once
    try {
      for await (const o of client.generate({
        requestId, promptTokenIds, sampling: params, priority: 0, cacheSalt: null, arrivalTime: Date.now(),
      })) {
        if (o.error) throw new Error(o.error);
        if (o.numCachedTokens !== undefined) c.numCachedTokens = o.numCachedTokens;
        c.tokenIds.push(...o.newTokenIds);
        if (o.logprobs) (c.logprobs ??= []).push(...o.logprobs);
        if (o.promptLogprobs) c.promptLogprobs = o.promptLogprobs;
        let d = detok.push(o.newTokenIds);
        if (d.stopped) {
          client.abort(requestId);
          c.text += d.deltaText;
          c.finishReason = 'stop';
          c.stopReason = d.stopString ?? null;
          c.final = true;
          yield c;
          return;
        }
        if (o.finished) {
          const tail = detok.finish();
          d = { ...d, deltaText: d.deltaText + tail.deltaText };
          c.finishReason = o.finishReason ?? 'stop';
          c.stopReason = tail.stopped ? tail.stopString ?? null : o.stopTokenId ?? null;
          if (tail.stopped) c.finishReason = 'stop';
          c.final = true;
        }
        c.text += d.deltaText;
        yield c;
        if (c.final) return;
      }
    } finally {
      if (!c.final) client.abort(requestId);
    }
  }
}

function isTokenIds(p: unknown): p is readonly number[] {
  return Array.isArray(p) && p.length > 0 && typeof p[0] === 'number';
}
