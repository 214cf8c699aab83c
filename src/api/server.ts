// The OpenAI-compatible HTTP server: routes, auth, limits, health, drain.

import { STATUS_CODES } from 'node:http';
import type { Duplex } from 'node:stream';
import cors from '@fastify/cors';
import Fastify, { type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify';
import { checkRequestCaps } from './caps.js';
import { ApiError, badRequest, toApiError, unauthorized, unavailable } from './errors.js';
import type { ServeContext } from './generation.js';
import { ApiMetrics } from './metrics.js';
import { DEFAULT_CORS, serverLimits, type ServerOptions } from './options.js';
import { registerChat } from './routes/chat.js';
import { registerCompletions } from './routes/completions.js';
import { registerEmbeddings } from './routes/embeddings.js';
import { registerResponses } from './routes/responses.js';
import type { RouteDeps } from './routes/deps.js';
import { registerTokenize } from './routes/tokenize.js';
import { InflightRequests } from './serve.js';
import { WorkerPool } from './worker-pool.js';
import { jsonShapeWithin } from './grammar-limits.js';
import { QUIRE_VERSION } from '../version.js';

export interface QuireServer {
  app: FastifyInstance;
  metrics: ApiMetrics;
  /**
   * Model loaded: /health answers 200. `kvCacheTokens`: tokens the engine's KV cache holds (a request that needs
   * more is a 400).
   */
  setReady(engine?: { kvCacheTokens: number }): void;
  /** The worker pool of grammar compiles and request chat templates. */
  readonly pool: WorkerPool;
  /** /health and new requests answer 503; running requests get timeoutMs to finish, then are aborted. */
  drain(timeoutMs: number): Promise<void>;
  /** Generation requests in flight. */
  readonly numInflight: number;
}

export type { ServerOptions } from './options.js';

type State = 'loading' | 'ready' | 'draining';

const GENERATION_PATHS = new Set(['/v1/completions', '/v1/chat/completions', '/v1/responses']);
/** The routes that run the engine (refused while loading, draining or failed). */
const ENGINE_PATHS = new Set([...GENERATION_PATHS, '/v1/embeddings']);
const API_NAMES: Record<string, string> = {
  '/v1/completions': 'Completions', '/v1/chat/completions': 'Chat Completions', '/v1/responses': 'Responses',
};

function engineErrorOf(engine: object): string | null {
  const e = (engine as { error?: unknown }).error;
  return typeof e === 'string' ? e : null;
}

function sendError(reply: FastifyReply, err: ApiError): FastifyReply {
  return reply.code(err.statusCode).type('application/json').send(err.toBody());
}

/** Malformed HTTP (before any route runs): an OpenAI error body, then the socket closes. */
function writeClientError(err: NodeJS.ErrnoException, socket: Duplex): void {
  if (err.code === 'ECONNRESET' || socket.destroyed) return;
  const e =
    err.code === 'HPE_HEADER_OVERFLOW' ? new ApiError(431, 'Request headers are too large.', 'invalid_request_error', null, 'headers_too_large')
    : err.code === 'ERR_HTTP_REQUEST_TIMEOUT' ? new ApiError(408, 'Request timed out.', 'invalid_request_error', null, 'timeout')
    : new ApiError(400, 'Malformed HTTP request.', 'invalid_request_error', null, 'bad_http');
  const body = JSON.stringify(e.toBody());
  if (socket.writable) {
    socket.write(`HTTP/1.1 ${e.statusCode} ${STATUS_CODES[e.statusCode]}\r\nContent-Type: application/json\r\n` +
      `Content-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`);
  }
  socket.destroy();
}

/**
 * JSON bodies: UTF-8 only (a charset other than utf-8 is a 400, not a misread body), nested at most `maxDepth`
 * levels (a deeper one would overflow a recursive walk later); a text/plain body is refused with the content type
 * to send, not read as a string.
 */
function registerBodyParsers(app: FastifyInstance, maxDepth: number): void {
  const parseJson = app.getDefaultJsonParser('error', 'ignore');
  app.removeContentTypeParser(['application/json', 'text/plain']);
  app.addContentTypeParser('application/json', { parseAs: 'string' }, (request, body, done) => {
    const charset = /;\s*charset\s*=\s*"?([^";\s]+)/i.exec(request.headers['content-type'] ?? '')?.[1]?.toLowerCase();
    if (charset !== undefined && charset !== 'utf-8' && charset !== 'utf8') {
      done(badRequest(`Unsupported charset "${charset}": send the JSON body as UTF-8 ("Content-Type: application/json").`,
        null, 'invalid_content_type'), undefined);
      return;
    }
    parseJson(request, body as string, (err, value) => {
      if (err) return done(err, undefined);
      if (!jsonShapeWithin(value, maxDepth)) {
        return done(badRequest(`Request body nests objects and lists more than ${maxDepth} levels deep.`, null, 'invalid_json'), undefined);
      }
      done(null, value);
    });
  });
  app.addContentTypeParser('text/plain', (_request, _payload, done) => {
    done(badRequest('Content-Type text/plain is not accepted: send the JSON body with "Content-Type: application/json".',
      null, 'invalid_content_type'), undefined);
  });
}

export function createServer(opts: ServerOptions): QuireServer {
  const limits = serverLimits(opts.limits);
  if (opts.enableAutoToolChoice && !opts.toolCallParser) {
    throw new Error('--enable-auto-tool-choice requires --tool-call-parser');
  }
  const app = Fastify({
    logger: opts.logger ?? false,
    bodyLimit: limits.bodyLimitBytes,
    http: { maxHeaderSize: limits.maxHeaderBytes },
    return503OnClosing: true,
    clientErrorHandler: writeClientError,
  });
  const metrics = new ApiMetrics(opts.engine, opts.metricsNames ?? 'both', opts.modelName);
  const inflight = new InflightRequests();
  const pool = new WorkerPool({ size: opts.workerPoolSize ?? 2, grammarVocab: opts.grammarVocab ?? null });
  // compiles and renders in flight end with the server (a request waiting on one gets a 503)
  app.addHook('preClose', () => pool.close());
  const ctx: ServeContext = {
    engine: opts.engine, tokenizer: opts.tokenizer, metrics, engineError: () => engineErrorOf(opts.engine),
  };
  const deps: RouteDeps = {
    ctx, tokenizer: opts.tokenizer, inflight, limits,
    modelName: opts.modelName,
    servedModelNames: [opts.modelName, ...(opts.servedModelNames ?? []).filter((n) => n !== opts.modelName)],
    maxModelLen: opts.maxModelLen,
    chatTemplate: opts.chatTemplate,
    allowRequestChatTemplate: opts.allowRequestChatTemplate ?? false,
    autoToolParser: opts.enableAutoToolChoice ? opts.toolCallParser ?? null : null,
    reasoningParser: opts.reasoningParser ?? null,
    bosToken: opts.bosToken ?? null,
    eosToken: opts.eosToken ?? null,
    samplingDefaults: opts.samplingDefaults ?? {},
    returnTokensAsTokenIds: opts.returnTokensAsTokenIds ?? false,
    pooler: opts.pooler ?? null,
    hiddenSize: opts.hiddenSize ?? null,
    pool,
    grammar: { pool, limits, compileTimeoutMs: limits.grammarCompileTimeoutMs },
    kvCacheTokens: null,
  };
  let state: State = 'loading';

  app.setErrorHandler((err, request, reply) => {
    const e = toApiError(err);
    if (e.statusCode >= 500) request.log.error({ err }, 'request failed');
    return sendError(reply, e);
  });
  app.setNotFoundHandler((request, reply) => {
    const path = request.url.split('?')[0]!;
    const allowed = ['GET', 'POST'].filter((m) => m !== request.method && app.hasRoute({ method: m as 'GET', url: path }));
    if (allowed.length > 0) {
      void reply.header('allow', allowed.join(', '));
      return sendError(reply, new ApiError(405, `${request.method} is not allowed on ${path}; use ${allowed.join(' or ')}.`,
        'invalid_request_error', null, 'method_not_allowed'));
    }
    return sendError(reply, new ApiError(404, `No route for ${request.method} ${request.url}.`, 'not_found_error', null, 'not_found'));
  });
  registerBodyParsers(app, limits.maxBodyDepth);
  // caps on lists and strings, before any route tokenizes, renders or compiles anything
  app.addHook('preHandler', async (request) => {
    if (request.method === 'POST') checkRequestCaps(request.body, limits, opts.maxModelLen);
  });

  // Browsers ask before they send (CORS preflight, no credentials): vLLM's defaults, every origin allowed.
  const c = opts.cors ?? DEFAULT_CORS;
  void app.register(cors, {
    origin: c.allowedOrigins.includes('*') ? '*' : c.allowedOrigins,
    methods: c.allowedMethods.includes('*') ? ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS'] : c.allowedMethods,
    ...(c.allowedHeaders.includes('*') ? {} : { allowedHeaders: c.allowedHeaders }),
    credentials: c.allowCredentials,
  });

  app.addHook('onRequest', async (request: FastifyRequest) => {
    const path = request.url.split('?')[0]!;
    const isV1 = path.startsWith('/v1/');
    // A preflight carries no Authorization (vLLM lets OPTIONS through too).
    if (opts.apiKey !== undefined && isV1 && request.method !== 'OPTIONS' && request.headers.authorization !== `Bearer ${opts.apiKey}`) {
      throw unauthorized();
    }
    if (request.method === 'POST' && GENERATION_PATHS.has(path) && deps.pooler !== null) {
      throw new ApiError(400, `The model is served for embeddings (--runner pooling): it does not support the ${API_NAMES[path]} API.`);
    }
    if (request.method === 'POST' && ENGINE_PATHS.has(path)) {
      if (state === 'draining') throw unavailable('The server is shutting down.');
      const failure = engineErrorOf(opts.engine);
      if (failure !== null) throw unavailable(`The engine failed: ${failure}`);
      if (state === 'loading') throw unavailable('The model is still loading.');
    }
  });

  const health = async (_request: FastifyRequest, reply: FastifyReply) => {
    const failure = engineErrorOf(opts.engine);
    if (state === 'ready' && failure === null) return reply.code(200).send({ status: 'ok' });
    const status = failure !== null ? 'engine_failed' : state;
    return reply.code(503).send({ status, ...(failure !== null ? { error: failure } : {}) });
  };
  app.get('/health', health);
  // vLLM's /ping (SageMaker's health check, GET or POST) answers as /health.
  app.get('/ping', health);
  app.post('/ping', health);
  app.get('/version', async () => ({ version: QUIRE_VERSION }));
  app.get('/metrics', async (_request, reply) => reply.type(metrics.contentType).send(await metrics.text()));

  registerCompletions(app, deps);
  registerChat(app, deps);
  registerResponses(app, deps);
  registerTokenize(app, deps);
  registerEmbeddings(app, deps);

  return {
    app,
    metrics,
    pool,
    setReady(engine?: { kvCacheTokens: number }) {
      if (engine !== undefined) deps.kvCacheTokens = engine.kvCacheTokens;
      if (state === 'loading') state = 'ready';
    },
    async drain(timeoutMs: number) {
      state = 'draining';
      if (!(await inflight.waitIdle(timeoutMs))) {
        inflight.abortAll();
        await inflight.waitIdle(1000);
      }
    },
    get numInflight() {
      return inflight.size;
    },
  };
}
