// The package's entry: `import { LLM, serve } from 'quire'`.

export { LLM } from './engine/llm.js';
export type { Completion, CompletionDelta, Embedding, Prompt } from './engine/llm.js';
export type { LLMOptions, LLMSamplingParams } from './engine/llm-params.js';
export type { EngineOptions } from './engine/options.js';
export { serve } from './serve.js';
export type { RunningServer, ServeOptions } from './serve.js';
export { defaultModelDir } from './loader/default-model.js';
export { SamplingParamError } from './sampling/validate.js';
export { ModelLoadError } from './loader/errors.js';
export { QUIRE_VERSION } from './version.js';
