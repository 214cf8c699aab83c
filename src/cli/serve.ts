// quire serve: the OpenAI-compatible server. The HTTP side listens at once
// (/health 503 while loading); the engine loads in a worker thread.

import { existsSync } from 'node:fs';
import { basename, join } from 'node:path';
import { Command, InvalidArgumentError, Option } from 'commander';
import type { MetricsNames } from '../api/metrics.js';
import { createServer } from '../api/server.js';
import { StatsLogger } from '../api/stats-logger.js';
import { REASONING_PARSERS, type ReasoningParserName } from '../api/reasoning.js';
import { TOOL_CALL_PARSERS, type ToolCallParserName } from '../api/tools.js';
import { DeferredEngineClient } from '../engine/deferred-client.js';
import { DataParallelClient, startEngineClient } from '../engine/data-parallel-client.js';
import { WorkerEngineClient } from '../engine/worker-client.js';
import { loadChatTemplateArg } from '../loader/chat-template.js';
import { loadModel } from '../loader/model-dir.js';
import { describeSamplingDefaults, parseGenerationOverride, samplingDefaults, type SamplingDefaults } from '../api/sampling-defaults.js';
import { addBooleanPair, addEngineFlags, engineOptionsFromFlags, HELP_GROUPS } from './engine-flags.js';
import { addVllmCompatFlags } from './vllm-flags.js';
import type { EngineOptions } from '../engine/options.js';
import { defaultMaxModelLen } from '../model/rope.js';
import { resolveModelPath } from '../loader/hub-cache.js';
import { readKnob } from '../knobs/knobs.js';
import { addLimitFlags, apiKeyArg, kvCacheRefusal, limitsFromFlags, portArg, secondsArg } from './serve-limits.js';
import { modelPoolerConfig, type PoolerConfig } from '../loader/pooler-config.js';
import { runNodeAgent } from '../engine/tp/node-agent.js';

export function serveCommand(): Command {
  const cmd = new Command('serve')
    .description('serve a model with the OpenAI API (/v1/completions, /v1/chat/completions, /metrics, ...)')
    .argument('[model]', 'the model directory, as `vllm serve <model>` takes it (or --model)');
  addEngineFlags(cmd);
  cmd.optionsGroup(HELP_GROUPS.model)
    .addOption(new Option('--runner <r>', 'generate text, or pool prompts into embeddings (/v1/embeddings)')
      .choices(['auto', 'generate', 'pooling']).default('auto'))
    .addOption(new Option('--task <t>', 'vLLM\'s older name for the runner: embed is --runner pooling')
      .choices(['auto', 'generate', 'embed', 'embedding']).default('auto'))
    .addOption(new Option('--convert <c>', 'embed serves a *ForCausalLM model as an embedding model')
      .choices(['auto', 'none', 'embed']).default('auto'))
    .option('--generation-config <src>', 'default sampling parameters: the model\'s generation_config.json '
      + '(auto), none (vllm), or a folder\'s', 'auto')
    .option('--override-generation-config <json>', 'default sampling parameters over those, e.g. \'{"temperature": 0.5}\'',
      overrideArg);
  cmd.optionsGroup(HELP_GROUPS.server)
    .option('--host <addr>', 'address to listen on', '127.0.0.1')
    .option('--port <n>', 'port', portArg, 8000)
    .option('--served-model-name <name...>', 'model name(s) the API answers to (default: the directory name)')
    .option('--api-key <key>', 'require Authorization: Bearer <key> on /v1 routes (or QUIRE_API_KEY)', apiKeyArg)
    .option('--shutdown-timeout <s>', 'on SIGTERM, seconds running requests get to finish (the process ends by then, '
      + 'whatever is in flight)', secondsArg('--shutdown-timeout'), 30)
    .option('--chat-template <file-or-template>', 'the chat template (a file, or the template itself) instead of the model\'s')
    .option('--allowed-origins <json>', 'CORS: origins allowed, a JSON list', jsonList('--allowed-origins'), ['*'])
    .option('--allowed-methods <json>', 'CORS: methods allowed, a JSON list', jsonList('--allowed-methods'), ['*'])
    .option('--allowed-headers <json>', 'CORS: request headers allowed, a JSON list', jsonList('--allowed-headers'), ['*'])
    .option('--max-logprobs <n>', 'most logprobs / top_logprobs a request may ask for (-1: the vocabulary)', maxLogprobsArg, 20)
    .addOption(new Option('--uvicorn-log-level <level>', 'the HTTP server\'s log level (on when other than info)')
      .choices([...UVICORN_LOG_LEVELS]).default('info'));
  addBooleanPair(cmd, '--trust-request-chat-template', 'accept a chat_template sent in a request', false, HELP_GROUPS.server);
  addBooleanPair(cmd, '--allow-credentials', 'CORS: allow credentials', false, HELP_GROUPS.server);
  addBooleanPair(cmd, '--disable-log-stats', 'no engine stats line every 10 s', false, HELP_GROUPS.server);
  addBooleanPair(cmd, '--enable-log-requests', 'a log line per HTTP request', false, HELP_GROUPS.server);
  addBooleanPair(cmd, '--disable-log-requests', 'vLLM\'s older flag: no request log (the default)', false, HELP_GROUPS.server);
  addBooleanPair(cmd, '--return-tokens-as-token-ids', 'logprobs name tokens "token_id:<id>" unless a request says '
    + 'otherwise', false, HELP_GROUPS.server);
  cmd.optionsGroup(HELP_GROUPS.tools)
    .addOption(new Option('--tool-call-parser <name>', 'the format the model writes tool calls in (hermes: Qwen2.5, '
      + 'Qwen3, Hermes; llama3_json: Llama 3.1+; mistral: Mistral)').choices([...TOOL_CALL_PARSERS]))
    .addOption(new Option('--reasoning-parser <name>', 'put the thinking of chat outputs (<think>...</think>) in '
      + 'reasoning_content').choices([...REASONING_PARSERS]))
    .option('--pooler-config <json>', 'for --runner pooling: \'{"pooling_type": "LAST", "normalize": true}\' '
      + '(default: the model\'s sentence-transformers files, else LAST, normalized)', jsonObject('--pooler-config'));
  addBooleanPair(cmd, '--enable-auto-tool-choice', 'parse tool calls out of the output when tool_choice is "auto" '
    + '(the default when a request sends tools); needs --tool-call-parser', false, HELP_GROUPS.tools);
  cmd.optionsGroup('Options:');
  cmd.optionsGroup(HELP_GROUPS.server);
  addLimitFlags(cmd);
  cmd.optionsGroup('Options:');
  addVllmCompatFlags(cmd);
  return cmd.action(async (model: string | undefined, flags: Record<string, unknown>) => {
    if (model !== undefined) {
      if (flags.model !== undefined && flags.model !== model) cmd.error(`quire serve: the model is given twice: ${model} and --model ${flags.model as string}`);
      flags.model = model;
    }
    if (flags.enableAutoToolChoice && flags.toolCallParser === undefined) {
      cmd.error('quire serve: --enable-auto-tool-choice requires --tool-call-parser (one of: ' + TOOL_CALL_PARSERS.join(', ') + ')');
    }
    const options = serveEngineOptions(flags);
    if (options.nodeRank > 0) {
      // another machine's tensor-parallel ranks, for node 0's engine: no server here
      try {
        await runNodeAgent(options, (line) => console.error(`quire: ${line}`));
      } catch (e) {
        cmd.error(`quire serve: ${(e as Error).message}`);
      }
      return;
    }
    let pooling = false;
    let logger: { level: string } | false = false;
    try {
      logger = serveLogger(flags);
      pooling = poolingRunner(flags);
      if (!pooling && flags.poolerConfig !== undefined) throw new Error('--pooler-config needs --runner pooling (or --task embed)');
    } catch (e) {
      cmd.error(`quire serve: ${(e as Error).message}`);
    }
    let chatTemplate: string | null = null;
    if (flags.chatTemplate !== undefined) {
      try {
        chatTemplate = loadChatTemplateArg(flags.chatTemplate as string);
      } catch (e) {
        cmd.error(`quire serve: ${(e as Error).message}`);
      }
    }
    const dir = await loadModel(options.model, options);
    let defaults: SamplingDefaults = {};
    try {
      defaults = samplingDefaults(flags.generationConfig as string, dir.dir, flags.overrideGenerationConfig as SamplingDefaults | undefined);
    } catch (e) {
      cmd.error(`quire serve: ${(e as Error).message}`);
    }
    let pooler: PoolerConfig | null = null;
    if (pooling) {
      try {
        pooler = modelPoolerConfig(dir.dir, (flags.poolerConfig as Record<string, unknown> | undefined) ?? null,
          options.hfOverrides ?? null);
      } catch (e) {
        cmd.error(`quire serve: ${(e as Error).message}`);
      }
    }
    const names = (flags.servedModelName as string[] | undefined) ?? [defaultServedName(options.model, dir.dir)];
    const maxModelLen = options.maxModelLen ?? defaultMaxModelLen(dir.config);
    const engine = new DeferredEngineClient();
    const apiKey = (flags.apiKey as string | undefined) ?? readKnob('QUIRE_API_KEY');
    const server = createServer({
      engine, tokenizer: dir.tokenizer, chatTemplate: chatTemplate ?? dir.chatTemplate, bosToken: dir.bosToken, eosToken: dir.eosToken,
      modelName: names[0]!, servedModelNames: names.slice(1), maxModelLen,
      ...(apiKey ? { apiKey } : {}),
      allowRequestChatTemplate: flags.trustRequestChatTemplate as boolean,
      limits: { ...limitsFromFlags(flags), maxLogprobs: servedMaxLogprobs(flags.maxLogprobs as number, dir.tokenizer.vocabSize) },
      grammarVocab: existsSync(join(dir.tokenizerDir, 'tokenizer.json')) ? {
        tokenizerJsonPath: join(dir.tokenizerDir, 'tokenizer.json'), vocabSize: dir.config.vocabSize,
        stopTokenIds: dir.generation.eosTokenIds,
      } : null,
      workerPoolSize: flags.grammarWorkers as number,
      metricsNames: flags.metricsNames as MetricsNames,
      samplingDefaults: defaults,
      returnTokensAsTokenIds: flags.returnTokensAsTokenIds as boolean,
      logger: logger !== false,
      enableAutoToolChoice: flags.enableAutoToolChoice as boolean,
      toolCallParser: (flags.toolCallParser as ToolCallParserName | undefined) ?? null,
      reasoningParser: (flags.reasoningParser as ReasoningParserName | undefined) ?? null,
      pooler, hiddenSize: dir.config.hiddenSize,
      cors: {
        allowedOrigins: flags.allowedOrigins as string[], allowedMethods: flags.allowedMethods as string[],
        allowedHeaders: flags.allowedHeaders as string[], allowCredentials: flags.allowCredentials as boolean,
      },
    });
    if (logger) server.app.log.level = logger.level;
    let address: string;
    try {
      address = await server.app.listen({ host: flags.host as string, port: flags.port as number });
    } catch (e) {
      const err = e as NodeJS.ErrnoException;
      const why = err.code === 'EADDRINUSE' ? 'the address is in use' : err.code === 'EACCES' ? 'permission denied'
        : err.code === 'EADDRNOTAVAIL' ? 'no such address on this machine' : err.message;
      console.error(`quire serve: cannot listen on ${flags.host as string}:${flags.port as number}: ${why}`);
      process.exitCode = 1;
      return;
    }
    console.log(`quire: loading ${dir.dir} (${dir.config.architecture}, ${dir.config.numLayers} layers, vocab ${dir.config.vocabSize})`);
    if (Object.keys(defaults).length > 0) {
      console.log(`quire: default sampling parameters ${describeSamplingDefaults(defaults)}, from the model's generation `
        + 'config (as vLLM); --generation-config vllm leaves requests the OpenAI defaults');
    }
    let client: WorkerEngineClient | DataParallelClient;
    try {
      client = await startEngineClient({ ...options, model: dir.dir });
    } catch (e) {
      engine.failed((e as Error).message);
      console.error(`quire: the model failed to load: ${(e as Error).message}`);
      await server.app.close();
      process.exitCode = 1;
      return;
    }
    engine.attach(client);
    if (client instanceof DataParallelClient) {
      stopOnReplicaFailure(client, (line) => console.error(line), async () => {
        await server.app.close();
        process.exit(1);
      });
    }
    const kvCacheTokens = (client.info.numBlocks - 1) * client.info.blockSize;
    const refusal = kvCacheRefusal(kvCacheTokens, client.info.maxModelLen);
    if (refusal !== null) {
      console.error(`quire serve: ${refusal}`);
      await client.shutdown();
      await server.app.close();
      process.exit(1);
    }
    server.setReady({ kvCacheTokens });
    const statsLogger = serveStatsLogger(flags, client, (line) => console.log(`quire: ${line}`));
    const i = client.info;
    console.log(`quire: backend ${i.backend} (${i.device}), ${i.numBlocks - 1} KV pages of ${i.blockSize} tokens `
      + (options.kvCacheDtype === 'fp8_e4m3' ? '(FP8 E4M3) ' : '')
      + `(${(i.numBlocks - 1) * i.blockSize} tokens), `
      + (i.numStateSlots > 0 ? `${i.numStateSlots} recurrent state slots of ${(i.bytesPerStateSlot / 1024).toFixed(1)} KiB `
        + '(one a sequence)' + (i.numCachedStateSlots > 0 ? ` and ${i.numCachedStateSlots} for states saved for the prefix `
        + 'cache' : '') + ', ' : '')
      + `max model len ${i.maxModelLen}, max num batched tokens `
      + `${i.maxNumBatchedTokens}, max num seqs ${i.maxNumSeqs}, loaded in ${i.loadMs} ms`
      + (options.quantization === 'fp8' ? ', projections quantized to block FP8 at load (--quantization fp8)' : ''));
    if (client instanceof DataParallelClient) {
      console.log(`quire: data parallel: ${client.replicas.length} engine replicas (engine="0" to "${client.replicas.length - 1}" `
        + 'in /metrics), the KV pages, sequences and token budget above are each one\'s; a request goes to the least-loaded '
        + 'replica, or to the one holding its prompt prefix in cache');
    }
    if (pooler) {
      console.log(`quire: pooling runner: ${pooler.poolingType} token, ${pooler.normalize ? '' : 'not '}normalized`);
      console.log(`quire: ready on ${address} as "${names[0]}"  try: curl ${address}/v1/embeddings `
        + `-H 'Content-Type: application/json' -d '{"input": "Once upon a time"}'`);
    } else {
      console.log(`quire: ready on ${address} as "${names[0]}"  try: curl ${address}/v1/completions `
        + `-H 'Content-Type: application/json' -d '{"prompt": "Once upon a time", "max_tokens": 32}'`);
    }

    let stopping = false;
    const stop = async (signal: string): Promise<void> => {
      if (stopping) return;
      stopping = true;
      console.log(`quire: ${signal}: draining (up to ${flags.shutdownTimeout} s)`);
      const timeoutMs = (flags.shutdownTimeout as number) * 1000;
      // whatever is in flight (a compile, a step, a socket), the process ends within the timeout and a grace second
      setTimeout(() => {
        console.error(`quire: ${signal}: still busy after --shutdown-timeout ${flags.shutdownTimeout} s; exiting`);
        process.exit(0);
      }, timeoutMs + 1000).unref();
      await server.drain(timeoutMs);
      statsLogger?.stop();
      await server.app.close();
      const trace = await client.shutdownWithTrace();
      if (trace) console.log(trace);
      process.exit(0);
    };
    process.on('SIGTERM', () => void stop('SIGTERM'));
    process.on('SIGINT', () => void stop('SIGINT'));
  });
}

/**
 * A data-parallel engine whose replica fails ends the server (as vLLM's API server does when an engine core dies),
 * rather than serving 503s from a process that is half gone: the message, which names the replica, is logged, then
 * `stop` runs (it closes the server and exits 1), and the process ends within 5 s whatever `stop` waits on.
 */
export function stopOnReplicaFailure(client: DataParallelClient, log: (line: string) => void,
  stop: () => Promise<void>, exit: (code: number) => void = (code) => process.exit(code)): void {
  client.onFailure = (message) => {
    log(`quire serve: ${message}; the data-parallel engine has stopped, and the server with it`);
    setTimeout(() => exit(1), 5000).unref();
    void stop();
  };
}

/** The engine options of `quire serve`: the flags, run as vLLM's API server (its default token budget). */
export function serveEngineOptions(flags: Record<string, unknown>): EngineOptions {
  return { ...engineOptionsFromFlags(flags), usageContext: 'api-server' };
}

/** The engine stats line every 10 s, started; null with --disable-log-stats. */
export function serveStatsLogger(flags: Record<string, unknown>, engine: ConstructorParameters<typeof StatsLogger>[0],
  log: (line: string) => void): StatsLogger | null {
  if (flags.disableLogStats) return null;
  const logger = new StatsLogger(engine, log);
  logger.start();
  return logger;
}

/**
 * Whether --runner, --task and --convert (vLLM's three ways to say it) ask for a pooling runner; refuses them
 * contradicting each other.
 */
export function poolingRunner(flags: Record<string, unknown>): boolean {
  const runner = (flags.runner as string | undefined) ?? 'auto';
  const task = (flags.task as string | undefined) ?? 'auto';
  const convert = (flags.convert as string | undefined) ?? 'auto';
  const embed = task === 'embed' || task === 'embedding' || convert === 'embed';
  if (runner === 'generate' && embed) throw new Error(`--runner generate contradicts ${task !== 'auto' ? `--task ${task}` : '--convert embed'}`);
  if (runner === 'pooling' && task === 'generate') throw new Error('--runner pooling contradicts --task generate');
  return runner === 'pooling' || embed;
}

/** uvicorn's log levels (vLLM's --uvicorn-log-level), and the Fastify (pino) level each is. */
export const UVICORN_LOG_LEVELS = ['critical', 'error', 'warning', 'info', 'debug', 'trace'] as const;

/**
 * The HTTP server's logger: off unless --enable-log-requests, or a --uvicorn-log-level other than info, asks for it
 * (vLLM logs every request at info through uvicorn's access log; Quire by default logs none).
 */
export function serveLogger(flags: Record<string, unknown>): { level: string } | false {
  const level = (flags.uvicornLogLevel as string | undefined) ?? 'info';
  const pino: Record<string, string> = { critical: 'fatal', error: 'error', warning: 'warn', info: 'info', debug: 'debug', trace: 'trace' };
  if (flags.enableLogRequests === true && flags.disableLogRequests === true) {
    throw new Error('--enable-log-requests contradicts --disable-log-requests');
  }
  if (flags.enableLogRequests === true || level !== 'info') return { level: pino[level]! };
  return false;
}

/** A flag whose value is a JSON object (vLLM's --pooler-config). */
function jsonObject(flag: string): (value: string) => Record<string, unknown> {
  return (value) => {
    let v: unknown;
    try {
      v = JSON.parse(value);
    } catch (e) {
      throw new InvalidArgumentError(`${flag}: not JSON (${(e as Error).message})`);
    }
    if (typeof v !== 'object' || v === null || Array.isArray(v)) throw new InvalidArgumentError(`${flag} takes a JSON object`);
    return v as Record<string, unknown>;
  };
}

/** A flag whose value is a JSON list of strings (vLLM's CORS flags). */
function jsonList(flag: string): (value: string) => string[] {
  return (value) => {
    let v: unknown;
    try {
      v = JSON.parse(value);
    } catch {
      v = undefined;
    }
    if (!Array.isArray(v) || !v.every((x) => typeof x === 'string')) {
      throw new InvalidArgumentError(`${flag} takes a JSON list of strings, e.g. '["https://example.com"]'.`);
    }
    return v;
  };
}

/** --override-generation-config: checked before anything loads. */
function overrideArg(value: string): SamplingDefaults {
  try {
    return parseGenerationOverride(value);
  } catch (e) {
    throw new InvalidArgumentError((e as Error).message);
  }
}

/** --max-logprobs: an integer >= 0, or -1 (as vLLM: up to the vocabulary). */
export function maxLogprobsArg(value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < -1) throw new InvalidArgumentError('--max-logprobs takes an integer >= 0, or -1 for the whole vocabulary.');
  return n;
}

/** The cap a --max-logprobs value sets: -1 is the vocabulary's size. */
export function servedMaxLogprobs(flag: number, vocabSize: number): number {
  return flag < 0 ? vocabSize : flag;
}

/** The name a model is served as without --served-model-name: a repo id as given (as vLLM), else its directory's name. */
export function defaultServedName(model: string, dir: string, env = process.env): string {
  return resolveModelPath(model, env) !== model ? model : basename(dir);
}

