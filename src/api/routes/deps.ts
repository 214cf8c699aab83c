import type { PoolerConfig } from '../../loader/pooler-config.js';
import type { Tokenizer } from '../../loader/types.js';
import { modelNotFound } from '../errors.js';
import type { ServeContext } from '../generation.js';
import type { ServerLimits } from '../options.js';
import type { SamplingDefaults } from '../sampling-defaults.js';
import type { InflightRequests } from '../serve.js';
import type { ReasoningParserName } from '../reasoning.js';
import type { ToolCallParserName } from '../tools.js';
import type { GrammarCheck } from '../structured.js';
import type { WorkerPool } from '../worker-pool.js';

/** What every route needs of the server. */
export interface RouteDeps {
  ctx: ServeContext;
  tokenizer: Tokenizer;
  inflight: InflightRequests;
  limits: ServerLimits;
  modelName: string;
  servedModelNames: string[];
  maxModelLen: number;
  chatTemplate: string | null;
  allowRequestChatTemplate: boolean;
  /** The tool-call parser of `tool_choice: "auto"`; null unless the server enabled auto tool choice. */
  autoToolParser: ToolCallParserName | null;
  /** Splits chat outputs' thinking into `reasoning_content` (--reasoning-parser); null: off. */
  reasoningParser: ReasoningParserName | null;
  bosToken: string | null;
  eosToken: string | null;
  /** Logprobs name tokens by id when a request does not say (--return-tokens-as-token-ids). */
  returnTokensAsTokenIds: boolean;
  /** What a request's missing sampling fields default to (the model's generation config). */
  samplingDefaults: SamplingDefaults;
  /** A pooling runner's pooler (/v1/embeddings served, generation refused); null: a generating runner. */
  pooler: PoolerConfig | null;
  /** The model's hidden size (the largest embedding `dimensions`); null: not known. */
  hiddenSize: number | null;
  /** Grammar compiles and request chat templates run here. */
  pool: WorkerPool;
  grammar: GrammarCheck;
  /** Tokens the engine's KV cache holds (a request that needs more is a 400); null: not known yet. */
  kvCacheTokens: number | null;
}

/** 404 when a model is named and it is not one we serve; else the name to answer with. */
export function resolveModel(d: RouteDeps, model: string | null): string {
  if (model === null || model === '') return d.modelName;
  if (!d.servedModelNames.includes(model)) throw modelNotFound(model);
  return model;
}
