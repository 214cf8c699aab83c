// serve(): the OpenAI-compatible server of `quire serve`, started from a program. The model loads in a worker
// thread, as the CLI loads it; the promise resolves once it answers requests.

import { basename } from 'node:path';
import { createServer, type QuireServer } from './api/server.js';
import { samplingDefaults } from './api/sampling-defaults.js';
import { DeferredEngineClient } from './engine/deferred-client.js';
import { toEngineOptions, type LLMOptions } from './engine/llm-params.js';
import { engineOptions } from './engine/options.js';
import { startEngineClient } from './engine/data-parallel-client.js';
import { defaultModelDir } from './loader/default-model.js';
import { loadModel } from './loader/model-dir.js';
import { defaultMaxModelLen } from './model/rope.js';

export interface ServeOptions {
  /** A model directory or a cached Hugging Face repo id; default the bundled demo model. */
  model?: string;
  /** Default 127.0.0.1. */
  host?: string;
  /** Default 8000; 0 picks a free port (see `url`). */
  port?: number;
  /** The name the API answers to; default the model directory's name. */
  servedModelName?: string;
  /** Requests to /v1 must carry `Authorization: Bearer <apiKey>`. */
  apiKey?: string;
  /** The engine's options, as `new LLM(model, options)` takes them (max_model_len or maxModelLen, ...). */
  engine?: LLMOptions;
}

export interface RunningServer {
  /** Where it listens, e.g. http://127.0.0.1:8000 (the API under /v1). */
  url: string;
  /** The name the API answers to. */
  modelName: string;
  server: QuireServer;
  /** Finishes running requests (up to drainMs), then stops the server and the engine. */
  close(drainMs?: number): Promise<void>;
}

const SERVE_KEYS = new Set(['model', 'host', 'port', 'servedModelName', 'apiKey', 'engine']);

export async function serve(options: ServeOptions = {}): Promise<RunningServer> {
  const unknown = Object.keys(options).filter((k) => !SERVE_KEYS.has(k));
  if (unknown.length > 0) {
    throw new TypeError(`serve: unknown option ${unknown.join(', ')}; it takes ${[...SERVE_KEYS].join(', ')}.`);
  }
  const opts = engineOptions({ ...toEngineOptions(options.engine), model: options.model ?? defaultModelDir(),
    usageContext: 'api-server' });
  const dir = await loadModel(opts.model, opts);
  const modelName = options.servedModelName ?? basename(dir.dir);
  const engine = new DeferredEngineClient();
  const server = createServer({
    engine, tokenizer: dir.tokenizer, chatTemplate: dir.chatTemplate, bosToken: dir.bosToken, eosToken: dir.eosToken,
    modelName, maxModelLen: opts.maxModelLen ?? defaultMaxModelLen(dir.config),
    ...(options.apiKey ? { apiKey: options.apiKey } : {}),
    samplingDefaults: samplingDefaults('auto', dir.dir), hiddenSize: dir.config.hiddenSize,
  });
  const url = await server.app.listen({ host: options.host ?? '127.0.0.1', port: options.port ?? 8000 });
  let client: Awaited<ReturnType<typeof startEngineClient>>;
  try {
    // data_parallel_size N > 1: N engines behind one router; a replica's failure fails the engine (503s), it does not end the program
    client = await startEngineClient({ ...opts, model: dir.dir });
  } catch (e) {
    await server.app.close();
    throw e;
  }
  engine.attach(client);
  server.setReady();
  return {
    url, modelName, server,
    async close(drainMs = 0) {
      await server.drain(drainMs);
      await server.app.close();
      await client.shutdown();
    },
  };
}
