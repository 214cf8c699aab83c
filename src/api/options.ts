// What createServer needs, and the limits it enforces (each with a default).

import type { PoolerConfig } from '../loader/pooler-config.js';
import { DEFAULT_CAPS, type RequestCaps } from './caps.js';
import { DEFAULT_GRAMMAR_LIMITS, type GrammarLimits } from './grammar-limits.js';
import type { PoolGrammarVocab } from './worker-pool.js';
import type { MetricsNames } from './metrics.js';
import type { EngineClient } from '../engine/client.js';
import type { Tokenizer } from '../loader/types.js';
import type { ReasoningParserName } from './reasoning.js';
import type { SamplingDefaults } from './sampling-defaults.js';
import type { ToolCallParserName } from './tools.js';

export interface ServerLimits extends RequestCaps, GrammarLimits {
  /** Request body, bytes (413 beyond). */
  bodyLimitBytes: number;
  /** All request headers together, bytes (431 beyond). */
  maxHeaderBytes: number;
  maxN: number;
  maxStopStrings: number;
  /** Caps completions `logprobs` and chat `top_logprobs`. */
  maxLogprobs: number;
  /** Caps the number of prompts in one completions request. */
  maxPromptsPerRequest: number;
  /** Nesting of a request body's objects and lists (400 beyond). */
  maxBodyDepth: number;
  /** A grammar compile longer than this is a 400 (--grammar-compile-timeout). */
  grammarCompileTimeoutMs: number;
  /** A request's chat template rendering longer than this is a 400 (--chat-template-render-timeout). */
  chatTemplateRenderTimeoutMs: number;
}

export interface ServerOptions {
  engine: EngineClient;
  tokenizer: Tokenizer;
  chatTemplate: string | null;
  /** Template strings for bos_token / eos_token (default: the tokenizer's tokens). */
  bosToken?: string | null;
  eosToken?: string | null;
  modelName: string;
  /** Other names the model answers to. */
  servedModelNames?: string[];
  maxModelLen: number;
  apiKey?: string;
  allowRequestChatTemplate?: boolean;
  /** vLLM's --enable-auto-tool-choice: `tool_choice: "auto"` parses tool calls out of the output. */
  enableAutoToolChoice?: boolean;
  /** vLLM's --tool-call-parser: the output format of tool calls. */
  toolCallParser?: ToolCallParserName | null;
  /** vLLM's --reasoning-parser: chat outputs' `<think>` blocks go to `reasoning_content`. */
  reasoningParser?: ReasoningParserName | null;
  limits?: Partial<ServerLimits>;
  /** vLLM's --return-tokens-as-token-ids: logprobs name tokens "token_id:<id>" unless a request says otherwise. */
  returnTokensAsTokenIds?: boolean;
  /** Sampling fields a request leaves out take these (vLLM's --generation-config); default none. */
  samplingDefaults?: SamplingDefaults;
  /** CORS (vLLM's --allowed-origins, --allowed-methods, --allowed-headers, --allow-credentials). */
  cors?: CorsOptions;
  /** Fastify logger on/off. */
  logger?: boolean;
  /**
   * A pooling runner (vLLM's --runner pooling / --task embed): /v1/embeddings with this pooler, and the generation
   * routes refused. Absent or null: a generating runner.
   */
  pooler?: PoolerConfig | null;
  /** The model's hidden size (bounds an embedding request's `dimensions`). */
  hiddenSize?: number;
  /** The vocabulary grammars are compiled against in the worker pool (as the engine will); absent: checked without. */
  grammarVocab?: PoolGrammarVocab | null;
  /** /metrics names: quire:, vllm: (with model_name), or both (default). */
  metricsNames?: MetricsNames;
  /** Worker threads for grammar compiles and request chat templates (default 2). */
  workerPoolSize?: number;
}

export interface CorsOptions {
  /** '*' allows any origin. */
  allowedOrigins: string[];
  allowedMethods: string[];
  /** '*' allows whatever headers the preflight asks for. */
  allowedHeaders: string[];
  allowCredentials: boolean;
}

/** vLLM's defaults: any origin, method and header; no credentials. */
export const DEFAULT_CORS: CorsOptions = { allowedOrigins: ['*'], allowedMethods: ['*'], allowedHeaders: ['*'], allowCredentials: false };

export const DEFAULT_LIMITS: ServerLimits = {
  bodyLimitBytes: 8 * 1024 * 1024,
  maxHeaderBytes: 16 * 1024,
  maxN: 16,
  maxStopStrings: 16,
  maxLogprobs: 20,
  maxPromptsPerRequest: 256,
  maxBodyDepth: 256,
  grammarCompileTimeoutMs: 10_000,
  chatTemplateRenderTimeoutMs: 2_000,
  ...DEFAULT_CAPS,
  ...DEFAULT_GRAMMAR_LIMITS,
};

export function serverLimits(o: Partial<ServerLimits> = {}): ServerLimits {
  return { ...DEFAULT_LIMITS, ...o };
}
